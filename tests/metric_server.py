"""A real libtpu-style RuntimeMetricService on 127.0.0.1, built on the tpu-info stubs.

It serves values that change over time (a new "tick" every `period_s`) for its own number of
devices, and logs every answer it sends, so tests can check that the recorded timeline is what was
served at the sample times. `kill()` stops it; `stall_s` makes every handler sleep first.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from tpu_info.proto import tpu_metric_service_pb2 as pb
from tpu_info.proto import tpu_metric_service_pb2_grpc as pb_grpc

GIB, MIB = 2**30, 2**20
TOTAL_BYTES = 16 * GIB
EXEC_SCALE_US, EXEC_GROWTH, EXEC_BUCKETS = 1.0, 2.0, 24
EXECS_PER_TICK = 10


def usage_bytes(device: int, tick: int) -> int:
    return (device + 1) * GIB + tick * MIB


def duty_pct(device: int, tick: int) -> float:
    return float((10 * device + 3 * tick) % 100) + 0.25


def queue_size(device: int, tick: int) -> int:
    return (tick + device) % 7


def exec_base_us(device: int) -> float:
    """Per tick: 9 executions of this many µs and 1 of ten times it, so p50 = base, p99 ~ 10 x base."""
    return 100.0 * (device + 1)


def bucket_index(value_us: float) -> int:
    """Bucket of `value_us` for Distribution exponential buckets (0: underflow, N+1: overflow)."""
    if value_us < EXEC_SCALE_US:
        return 0
    i = 1
    while i <= EXEC_BUCKETS and value_us >= EXEC_SCALE_US * EXEC_GROWTH**i:
        i += 1
    return i


@dataclass
class MetricServer:
    devices: int = 3
    period_s: float = 0.2
    stall_s: float = 0.0
    served: list[tuple[float, str, dict[int, float]]] = field(default_factory=list)
    port: int = 0

    def start(self) -> MetricServer:
        self.t0 = time.time()
        self._killed = threading.Event()
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_RuntimeMetricServiceServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_secure_port("127.0.0.1:0", grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP))
        self._server.start()
        return self

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def tick(self, t: float) -> int:
        return int((t - self.t0) / self.period_s)

    def tick_window(self, tick: int) -> tuple[float, float]:
        return self.t0 + tick * self.period_s, self.t0 + (tick + 1) * self.period_s

    def kill(self) -> float:
        """Stop serving now (connections are cut); returns the time it happened."""
        t = time.time()
        self._killed.set()  # wakes stalled handlers
        self._server.stop(grace=0).wait()
        return t

    def response(self, name: str) -> pb.MetricResponse:
        if self.stall_s:
            self._killed.wait(self.stall_s)
        t = time.time()
        tick = self.tick(t)
        metrics, values = [], {}
        for d in range(self.devices):
            if name == "tpu.runtime.hbm.memory.usage.bytes":
                values[d] = usage_bytes(d, tick)
                metrics.append(pb.Metric(attribute=pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=d)), gauge=pb.Gauge(as_int=values[d])))
            elif name == "tpu.runtime.hbm.memory.total.bytes":
                values[d] = TOTAL_BYTES
                metrics.append(pb.Metric(attribute=pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=d)), gauge=pb.Gauge(as_int=TOTAL_BYTES)))
            elif name == "tpu.runtime.tensorcore.dutycycle.percent":
                values[d] = duty_pct(d, tick)
                metrics.append(pb.Metric(attribute=pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=d)), gauge=pb.Gauge(as_double=values[d])))
            elif name == "hlo.queue.size.gauge":
                values[d] = queue_size(d, tick)
                metrics.append(pb.Metric(attribute=_ordinal(d), gauge=pb.Gauge(as_int=values[d])))
            elif name == "hlo.execution.timing.distribution.microseconds":
                values[d] = tick * EXECS_PER_TICK
                metrics.append(pb.Metric(attribute=_ordinal(d), distribution=_histogram(d, tick)))
            else:
                return None
        with self._lock:
            self.served.append((t, name, values))
        return pb.MetricResponse(metric=pb.TPUMetric(name=name, metrics=metrics))


def _ordinal(device: int) -> pb.Attribute:
    """HLO metrics name the device in a key-value list, as newer libtpu does (a string ordinal)."""
    kv = pb.KeyValueList(attributes=[pb.Attribute(key="device_ordinal", value=pb.AttrValue(string_attr=str(device))), pb.Attribute(key="core_type", value=pb.AttrValue(string_attr="tensor_core"))])
    return pb.Attribute(key="", value=pb.AttrValue(kvlist_attr=kv))


def _histogram(device: int, tick: int) -> pb.Distribution:
    counts = [0] * (EXEC_BUCKETS + 2)
    base = exec_base_us(device)
    counts[bucket_index(base)] += 9 * tick
    counts[bucket_index(10 * base)] += tick
    total = EXECS_PER_TICK * tick
    mean = (9 * base + 10 * base) / EXECS_PER_TICK if total else 0.0
    options = pb.Distribution.BucketOptions(exponential_buckets=pb.Distribution.BucketOptions.Exponential(num_finite_buckets=EXEC_BUCKETS, growth_factor=EXEC_GROWTH, scale=EXEC_SCALE_US))
    return pb.Distribution(count=total, mean=mean, bucket_options=options, bucket_counts=counts)


class _Servicer(pb_grpc.RuntimeMetricServiceServicer):
    def __init__(self, server: MetricServer) -> None:
        self.server = server

    def GetRuntimeMetric(self, request: pb.MetricRequest, context: grpc.ServicerContext) -> pb.MetricResponse:  # noqa: N802
        response = self.server.response(request.metric_name)
        if response is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown metric {request.metric_name}")
        return response


if __name__ == "__main__":  # serve until stdin closes: `python tests/metric_server.py [DEVICES]`
    import sys

    server = MetricServer(devices=int(sys.argv[1]) if len(sys.argv) > 1 else 4).start()
    print(server.addr, flush=True)
    sys.stdin.read()
    server.kill()
