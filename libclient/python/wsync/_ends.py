"""How slabs and views end, host or device alike: a begun slab (Slab,
DeviceSlab) is never committed implicitly, and the garbage collector aborts
one nobody committed; a view (View, DeviceView) is released when its `with`
block ends."""
from ._errors import ClosedError, WsyncError


class SlabLife:
    """Needs publisher, _cell (the C publisher it uses), _done, _pinned,
    abort() and _what ("slab")."""

    def _unpin(self):
        cell = self._cell
        with cell.lock:
            unpin, self._pinned = self._pinned, False
        if unpin:
            cell.unuse()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if self._done:
            return False
        try:
            self.abort()
        except (WsyncError, ClosedError):
            if et is None:
                raise
        if et is None:
            raise RuntimeError("wsync: a %s of model %r was left without commit() or "
                               "abort(); it was aborted" % (self._what, self.publisher.model))
        return False

    def __del__(self):
        try:
            if not self._done and not self.publisher._closed:
                self.abort()
        except Exception:
            pass
        try:
            self._unpin()
        except Exception:
            pass


class ViewLife:
    """Needs release()."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False
