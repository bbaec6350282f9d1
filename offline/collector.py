"""The cyclic garbage collector paused for a bounded batch of work: a preview's or a size's whole
command, a recording's build. Imports nothing heavy, so `llmserve size` can use it."""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused_gc():
    """The cyclic garbage collector off for a bounded batch of work (a build, a policy run, a command).

    The provider SDKs leave hundreds of thousands of long-lived objects (their classes and type
    hints) that every full collection walks again; a build allocates enough to trigger many, which
    cost a preview a third of its time beyond importing those SDKs. Reference counting still frees
    what it can; cycles wait for the collector, back on (if it was) when the batch ends.

    At the end, what the batch left (the SDK modules it imported among it) goes straight to the
    oldest generation: `gc.freeze()` then `gc.unfreeze()` (documented: the frozen objects are put
    back into the oldest generation) moves every tracked object there without walking any. Left in
    the youngest, the first collection after the batch walked them all (a sixth of a second in a
    preview); the next full collection still frees the cycles among them (the console script skips
    the one at exit: `llmserve.cli.entry`)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()
