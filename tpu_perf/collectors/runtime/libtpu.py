"""libtpu's RuntimeMetricService over gRPC: HBM in use and total, duty cycle, HLO queue, run times.

The same service `tpu-info` reads, queried the way its client does (`tpu_info.metrics`): one
`GetRuntimeMetric(MetricRequest(metric_name=...))` per metric over a channel with local
credentials. Unlike tpu-info every call carries a deadline and the five calls go out together, so a
stalled service costs the sampler thread at most `timeout_s` and never touches the training loop.

States: probing (never answered yet; libtpu starts serving only once the TPU backend is up),
live, down (answered before, then failed: one `unavailable` event marks the gap, retries back off,
`recovered` closes it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

HBM_USAGE = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HLO_QUEUE = "hlo.queue.size.gauge"
HLO_EXEC_TIMING = "hlo.execution.timing.distribution.microseconds"
METRICS = (HBM_USAGE, HBM_TOTAL, DUTY_CYCLE, HLO_QUEUE, HLO_EXEC_TIMING)

DEFAULT_ADDR = "localhost:8431"
"""libtpu's default port (tpu-info's default too)."""
ADDR_ENV = "TPU_PERF_TPU_METRICS_ADDR"
PORTS_ENV = "TPU_RUNTIME_METRICS_PORTS"
"""libtpu's own setting: a comma-separated port list, one per process sharing the host."""

CALL_TIMEOUT_S = 0.5
"""Deadline of each call. The service answers in about a millisecond on a healthy host."""
RETRY_MAX_S = 10.0
"""Longest wait between two tries while probing or down (back-off doubles from the interval)."""

Rows = list[dict[str, Any]]


def resolve_address(explicit: str | None = None, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The service address and where it came from: flag > TPU_PERF_TPU_METRICS_ADDR > libtpu's ports > default."""
    env = os.environ if env is None else env
    if explicit:
        return explicit, "flag"
    if env.get(ADDR_ENV):
        return env[ADDR_ENV], ADDR_ENV
    ports = [p.strip() for p in env.get(PORTS_ENV, "").split(",") if p.strip()]
    if ports:
        index = int(env.get("LOCAL_RANK", "0") or 0)
        return f"localhost:{ports[min(index, len(ports) - 1)]}", f"{PORTS_ENV}[{index}]"
    return DEFAULT_ADDR, "default"


def device_id(metric: Any) -> int | None:
    """Memory and duty-cycle metrics carry the id as the attribute's int; HLO metrics as `device_ordinal`."""
    value = metric.attribute.value
    if value.WhichOneof("attr") == "kvlist_attr":
        for attr in value.kvlist_attr.attributes:
            if attr.key == "device_ordinal":
                kind = attr.value.WhichOneof("attr")
                raw = attr.value.string_attr if kind == "string_attr" else attr.value.int_attr
                return int(raw) if str(raw).isdigit() else None
        return None
    return int(value.int_attr)


def bucket_bounds(options: Any) -> list[float]:
    """Finite bucket boundaries of a Distribution: bucket 0 is below bounds[0], the last above bounds[-1]."""
    kind = options.WhichOneof("options")
    if kind == "exponential_buckets":
        e = options.exponential_buckets
        return [e.scale * e.growth_factor**i for i in range(e.num_finite_buckets + 1)]
    if kind == "linear_buckets":
        lin = options.linear_buckets
        return [lin.offset + lin.width * i for i in range(lin.num_finite_buckets + 1)]
    if kind == "explicit_buckets":
        return list(options.explicit_buckets.bounds)
    return []


class LibtpuSource:
    """A sampler source (`sample() -> rows`) reading one libtpu metric service."""

    name = "libtpu"

    def __init__(self, addr: str, *, interval_s: float, timeout_s: float = CALL_TIMEOUT_S, origin: str = "default", log: Callable[[str], None] | None = None) -> None:
        import grpc  # noqa: F401  (fail here, at install, when grpc is missing)
        from tpu_info.proto import tpu_metric_service_pb2, tpu_metric_service_pb2_grpc

        self.addr, self.origin = addr, origin
        self.timeout_s = timeout_s
        self._pb, self._pb_grpc = tpu_metric_service_pb2, tpu_metric_service_pb2_grpc
        self._log = log
        self._channel: Any = None
        self._stub: Any = None
        self._metrics = list(METRICS)
        self.state = "probing"
        self._delay_s = self._min_delay_s = interval_s
        self._retry_at = 0.0

    # -- connection -------------------------------------------------------------------------------
    def _connect(self) -> None:
        import grpc

        self._channel = grpc.secure_channel(self.addr, grpc.local_channel_credentials())
        self._stub = self._pb_grpc.RuntimeMetricServiceStub(self._channel)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None

    def _fetch(self) -> dict[str, Any]:
        """All metrics at once (parallel calls, one deadline); raises the first transport error."""
        import grpc

        futures = {m: self._stub.GetRuntimeMetric.future(self._pb.MetricRequest(metric_name=m), timeout=self.timeout_s) for m in self._metrics}
        answers, failure = {}, None
        for metric, future in futures.items():
            try:
                answers[metric] = future.result().metric.metrics
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT):
                    self._metrics.remove(metric)  # this libtpu does not serve it: stop asking
                elif failure is None:
                    failure = exc
        if failure is not None and not answers:
            raise failure
        return answers

    # -- sampling ----------------------------------------------------------------------------------
    def sample(self) -> Rows:
        now = time.monotonic()
        if self.state != "live" and now < self._retry_at:
            return []
        if self._stub is None:
            self._connect()
        try:
            answers = self._fetch()
        except Exception as exc:
            return self._failed(exc, now)
        events = self._event("connected" if self.state == "probing" else "recovered") if self.state != "live" else []
        self.state, self._delay_s = "live", self._min_delay_s
        return events + self._rows(answers)

    def _failed(self, exc: Exception, now: float) -> Rows:
        self.close()  # a fresh channel next time: no inherited reconnect back-off
        self._retry_at = now + self._delay_s
        self._delay_s = min(self._delay_s * 2, RETRY_MAX_S)
        detail = getattr(exc, "code", lambda: None)()
        text = f"{detail.name if detail is not None else type(exc).__name__}: {getattr(exc, 'details', lambda: str(exc))()}"
        if self.state == "live":
            self.state = "down"
            return self._event("unavailable", text)
        return []

    def _event(self, event: str, detail: str = "") -> Rows:
        return [{"_table": "sampler", "source": self.name, "event": event, "detail": f"{self.addr} ({self.origin}) {detail}".strip()}]

    def finish(self) -> Rows:
        """At the end of the run: one info line if the service never answered."""
        self.close()
        if self.state != "probing":
            return []
        if self._log is not None:
            self._log(f"tpu-perf: info: no libtpu metric service answered at {self.addr} ({self.origin}); TPU runtime metrics skipped (set --tpu-metrics-addr HOST:PORT if it listens elsewhere)")
        return self._event("skipped", "never answered")

    def _rows(self, answers: dict[str, Any]) -> Rows:
        per_device: dict[int, dict[str, Any]] = {}

        def put(metric_name: str, key: str, value: Callable[[Any], Any]) -> None:
            for metric in answers.get(metric_name, ()):
                dev = device_id(metric)
                if dev is not None:
                    per_device.setdefault(dev, {})[key] = value(metric)

        put(HBM_USAGE, "bytes_in_use", lambda m: int(m.gauge.as_int))
        put(HBM_TOTAL, "limit_bytes", lambda m: int(m.gauge.as_int))
        put(DUTY_CYCLE, "duty_cycle_pct", lambda m: float(m.gauge.as_double))
        put(HLO_QUEUE, "hlo_queue_size", lambda m: int(m.gauge.as_int))
        put(HLO_EXEC_TIMING, "exec", lambda m: m.distribution)
        rows: Rows = []
        for dev in sorted(per_device):
            values, device = per_device[dev], f"tpu:{dev}"
            if "bytes_in_use" in values or "limit_bytes" in values:
                rows.append({"_table": "memory", "device": device, "bytes_in_use": values.get("bytes_in_use"), "peak_bytes": None, "limit_bytes": values.get("limit_bytes"), "source": self.name})
            runtime = {"_table": "runtime", "device": device, "source": self.name, "duty_cycle_pct": values.get("duty_cycle_pct"), "hlo_queue_size": values.get("hlo_queue_size")}
            dist = values.get("exec")
            if dist is not None:
                runtime.update(exec_count=int(dist.count), exec_mean_us=float(dist.mean), exec_bucket_counts=[int(c) for c in dist.bucket_counts], exec_bucket_bounds_us=bucket_bounds(dist.bucket_options))
            rows.append(runtime)
        return rows
