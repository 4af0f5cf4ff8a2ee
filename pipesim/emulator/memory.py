"""Live memory of one emulated rank, by category, counted with autograd hooks (the CPU path).

weights / gradients / optimizer are fixed sizes registered once; "activations" are the tensors
autograd saves for the backward (torch.autograd.graph.saved_tensors_hooks) plus the (input,
output-gradient) pairs a split backward keeps for its deferred W. Saved tensors are counted by
storage, once however many views of it are saved, and released when autograd drops them (the
graph is freed after the backward), so the count is what a caching allocator would hold for
activations. Parameters saved by a matmul are weights, not activations, and are skipped.
On CUDA the allocator's own statistics are used instead (see `cuda_snapshot`).
"""
from __future__ import annotations

from functools import lru_cache


class _Saved:
    """What the pack hook returns: the tensor; releases its storage's count when autograd drops it."""
    __slots__ = ("tensor", "counter", "ptr")

    def __init__(self, tensor, counter=None, ptr=0):
        self.tensor, self.counter, self.ptr = tensor, counter, ptr

    def __del__(self):
        if self.counter is not None:
            self.counter._release(self.ptr)


class MemoryCounter:
    def __init__(self):
        self.static = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
        self._live: dict[int, list] = {}    # storage ptr -> [nbytes, refs]
        self.activations = 0.0
        self.peak = 0.0
        self._skip: set[int] = set()       # parameter storages
        self._static_total = 0.0

    # -- static ---------------------------------------------------------------------------------
    def set_static(self, category: str, nbytes: float) -> None:
        self.static[category] = float(nbytes)
        self._static_total = sum(self.static.values())
        self._update_peak()

    def skip_storage_of(self, tensors) -> None:
        for t in tensors:
            self._skip.add(t.untyped_storage().data_ptr())

    # -- activations ----------------------------------------------------------------------------
    def retain(self, tensor) -> object:
        """Count `tensor`'s storage until the returned token is garbage collected."""
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        nbytes = storage.nbytes()
        if ptr in self._skip or nbytes == 0:
            return _Saved(tensor)
        entry = self._live.get(ptr)
        if entry is None:
            self._live[ptr] = [nbytes, 1]
            self.activations += nbytes
            if self.activations + self._static_total > self.peak:
                self.peak = self.activations + self._static_total
        else:
            entry[1] += 1
        return _Saved(tensor, self, ptr)

    def _release(self, ptr: int) -> None:
        entry = self._live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.activations -= entry[0]
            del self._live[ptr]

    def hooks(self):
        """Context manager: count every tensor autograd saves while it is active."""
        import torch

        def pack(t):
            return self.retain(t)

        def unpack(token):
            return token.tensor

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)

    # -- readings -------------------------------------------------------------------------------
    @property
    def total(self) -> float:
        return sum(self.static.values()) + self.activations

    def by_category(self) -> dict:
        return dict(self.static, activations=self.activations)

    def _update_peak(self) -> None:
        t = self.total
        if t > self.peak:
            self.peak = t

    def reset_peak(self) -> None:
        self.peak = self.total


# Actions between two returns of the C heap's free pages to the system (release_free_heap).
TRIM_EVERY_ACTIONS = 512


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc malloc_trim(0), which since glibc
    2.8 releases free pages anywhere in the heap, not only at its top). Without it the last stage
    of a long step grew by ~0.4 MB a micro-batch of 256 KB messages: freed activation buffers
    stay in the heap, pinned by long-lived small objects (trace events, losses) allocated between
    them. Pinning glibc's mmap threshold instead kept the memory flat but made every buffer a fresh
    mmap, 50 % slower a step. False where the C library has no malloc_trim."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim else False


@lru_cache(maxsize=1)
def _malloc_trim():
    """The C library's malloc_trim, looked up once (None where there is none)."""
    import ctypes
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def cuda_snapshot(device) -> tuple[float, float]:
    """(allocated, peak allocated) bytes from the CUDA caching allocator."""
    import torch
    return float(torch.cuda.memory_allocated(device)), float(torch.cuda.max_memory_allocated(device))
