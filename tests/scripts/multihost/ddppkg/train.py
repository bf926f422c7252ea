"""`-m ddppkg.train STEPS SLOW_RANK SLOW_S`: the DDP job of torch_ddp.py run as a package module, the
way torchtitan is launched (`torchrun ... -m torchtitan.train`)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).parent.parent / "torch_ddp.py"), run_name="__main__")
