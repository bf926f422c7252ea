"""tpu-perf in a notebook: `tpu_perf.record()` (a context manager and decorator), the IPython
extension (`%load_ext tpu_perf`: `%%tpu_perf` records a cell, `%tpu_perf report|advise|check|ls`),
and views that Jupyter shows as HTML (`report`, `advise`, `check`, `runs`)."""

from tpu_perf.notebook.handle import RunHandle, View
from tpu_perf.notebook.handle import advise_view as advise
from tpu_perf.notebook.handle import check_view as check
from tpu_perf.notebook.handle import report_view as report
from tpu_perf.notebook.handle import runs_view as runs
from tpu_perf.notebook.recording import Recording, record

__all__ = ["Recording", "RunHandle", "View", "advise", "check", "record", "report", "runs"]
