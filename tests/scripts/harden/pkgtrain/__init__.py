"""A package whose __init__ imports the module that jits the step (as many training repos do)."""

from pkgtrain.model import init, train_step  # noqa: F401
