"""C handles and their Python owners: calls in flight, closing, the order
of frees, and handles that move to a new connection.

A Python handle (Client, Publisher, Subscriber) owns a _Cell: one C handle
(wsync_client, wsync_pub, wsync_sub) of one connection to a broker. When a
client follows a restarted broker (reconnect=True), it and its publishers
and subscribers each move to a new cell; the old one is *retired* and freed
once nothing uses it any more. What uses a cell:
  - a call in flight on it (from _enter() to _leave(cell)),
  - a View or Slab object taken from it (a device one too),
  - a cell opened on it (a subscription's on its client's).
So a view of a broker generation that is gone keeps its subscription and
client, with their mappings, until it is released, and then they are freed.
Closing a handle retires its current cell the same way. Finalizers may
therefore run in any order (the garbage collector breaking a reference
cycle, interpreter exit): a C handle is never used after its parent was
freed, because the child's cell uses the parent's until it is freed itself.

Locks: a cell uses its owner's reentrant lock (finalizers take only
reentrant locks, and use nothing that interpreter shutdown clears: the free
function is kept on the cell). A handle of the parent of a fork() is never
touched in the child.
"""
import os
import threading

from ._errors import ClosedError

# Bumped in a forked child: handles of the parent must not be used there (the
# child shares the parent's broker session; touching it would corrupt it).
_fork_gen = [0]


def _after_fork_in_child():
    _fork_gen[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def no_pickle(what):
    raise TypeError("wsync: a %s cannot be pickled or sent to another process: "
                    "connect in the child (pass wsync.ModelRef(endpoint, model), "
                    "e.g. from .ref(), and call its connect())" % what)


class _Cell:
    """One C handle and what keeps it: see the module's docstring.
    layout/by_name: a subscription's tensors once a view showed them;
    slots: what _views caches per slot of a subscription."""

    __slots__ = ("ptr", "lock", "uses", "retired", "freed", "parent", "free", "gen",
                 "gens", "layout", "by_name", "slots", "__weakref__")

    def __init__(self, ptr, free, parent, lock, gen):
        self.ptr = ptr
        self.free = free
        self.parent = parent
        self.lock = lock
        self.gen = gen
        self.gens = _fork_gen
        self.uses = 0
        self.retired = False
        self.freed = False
        self.layout = None
        self.by_name = None
        self.slots = None
        if parent is not None:
            parent.use()

    def use(self):
        with self.lock:
            self.uses += 1

    def unuse(self):
        with self.lock:
            self.uses -= 1
            if self.uses > 0 or not self.retired or self.freed:
                return
            self.freed = True
        self._free()

    def retire(self):
        """The owner is done with it: freed once nothing uses it. What the
        views cached per slot goes now (its arrays use the cell until they
        are gone)."""
        with self.lock:
            if self.retired:
                return
            self.retired = True
            slots, self.slots = self.slots, None
        del slots
        with self.lock:
            if self.uses > 0 or self.freed:
                return
            self.freed = True
        self._free()

    def _free(self):
        ptr, self.ptr = self.ptr, None
        if ptr is not None and self.gen == self.gens[0]:
            self.free(ptr)
        if self.parent is not None:
            self.parent.unuse()


class Handle:
    """What Client, Publisher and Subscriber share: close() stops new calls
    and waits for those in flight (a sliced wait notices within a slice and
    raises ClosedError); the C handle goes when its cell is free."""

    _what = "handle"
    _free_name = None          # the C function that frees our handle
    _gens = _fork_gen

    def _init_handle(self, parent=None):
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._busy = 0
        self._closed = False      # no new calls
        self._cell = None         # the current C handle
        self._parent = parent     # the handle our cells are opened on
        self._gen = _fork_gen[0]

    @property
    def _ptr(self):
        cell = self._cell
        return None if cell is None else cell.ptr

    def _enter(self):
        """Starts a call: returns the current cell, used until _leave(cell)."""
        with self._lock:
            if self._closed:
                raise ClosedError("wsync: %s is closed" % self._what)
            if self._gen != self._gens[0]:
                raise ClosedError("wsync: %s belongs to the parent process; connect anew "
                                  "after fork()" % self._what)
            self._busy += 1
            cell = self._cell
            cell.uses += 1
            return cell

    def _leave(self, cell):
        own = cell.lock is self._lock        # our own cells: one lock for both
        with self._lock:
            self._busy -= 1
            if not self._busy and self._closed:
                self._cond.notify_all()          # a close() waits for us
            if own:
                cell.uses -= 1
                if cell.uses > 0 or not cell.retired or cell.freed:
                    return
                cell.freed = True
        if own:
            cell._free()
        else:
            cell.unuse()

    def _mark_closed(self):
        """True if this call closes the handle; waits for calls in flight."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            while self._busy:
                self._cond.wait()
            return True

    def _new_cell(self, ptr, parent_cell, lib):
        """A cell for ptr, a C handle just opened on parent_cell (which the
        caller holds in a call)."""
        return _Cell(ptr, getattr(lib, self._free_name), parent_cell, self._lock, self._gen)

    def _take_cell(self, cell):
        """Makes cell the current one; the previous is retired."""
        with self._lock:
            old, self._cell = self._cell, cell
        if old is not None:
            old.retire()

    def _retire(self):
        """After close(): the current cell goes once nothing uses it."""
        cell = self._cell
        if cell is not None:
            cell.retire()

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __reduce__(self):
        no_pickle(self._what)

    def __del__(self):
        # Never waits: a call in flight (impossible for an object nobody
        # references, but daemon threads at exit are odd) leaves it open.
        try:
            if not getattr(self, "_closed", True) and not self._busy:
                self.close()
        except Exception:
            pass
