"""FLOPs of one optimizer update, as FlopCounterMode counts them: `k` forward+backward passes and the step."""

import torch
from torch.utils.flop_counter import FlopCounterMode


def update_flops(model, batches, loss_of) -> int:
    """FLOPs of one update's forward and backward passes over `batches`, under FlopCounterMode
    (the optimizer's elementwise step counts 0 there; it is not run, so no extra step is taken)."""
    with FlopCounterMode(display=False) as mode:
        for batch in batches:
            loss_of(model, batch).backward()
    model.zero_grad()
    return int(mode.get_total_flops())


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=128, n_layer=2, n_head=4)
    return GPT2LMHeadModel(config)
