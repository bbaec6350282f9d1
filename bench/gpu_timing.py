"""The timer both GPU microbenchmarks use: CUDA events after warm-up on a GPU, perf_counter on
the CPU (--dry-run). PyTorch is passed in: importing this module imports nothing heavy."""
from __future__ import annotations

import time


def make_timer(torch, dev: str, reps: int, warm: int):
    def timed(fn) -> float:
        for _ in range(warm):
            fn()
        if dev != "cuda":
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - t) / reps
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3 / reps
    return timed
