"""What a kernel's Python code reads from outside its arguments, for the in-process memo.

``@jit`` keeps the kernels it compiled in memory, keyed by the call's arguments. A kernel's
code can also read module globals (``BLOCK = 64``), attributes of them (``cfg.BLOCK``,
``np.pi``), variables of enclosing functions (closure cells), and helper functions and
``T.macro`` bodies that read globals of their own. If one of those changes between two calls
with the same arguments, the kernel must be compiled again: :class:`Reads` takes a snapshot of
each of them, and the memo key includes it.

What is tracked, precisely:

- every name the factory (or eager kernel), its nested functions (the ``@T.prim_func`` body),
  and -- transitively, three levels deep -- the plain functions and ``T.macro`` bodies it calls
  load as a global, with the chain of attributes read directly from it (``a.b.c``);
- the values of the closure cells of those functions.

A value is compared by value when it is a constant (``None``, bool, int, float, complex, str,
bytes) or a tuple, list, dict, set or frozenset of at most 256 such values (recursively);
anything else (modules, classes, functions, tensors, arbitrary objects) by identity. So
rebinding a global to another object is noticed, but mutating an object in place (an
attribute of an instance changed after it was read, a numpy array written to) is not -- pass
such values as arguments, or call ``fn.cache_clear()`` (TileLang has the same gap for every
global). Functions from tilewright, TVM, torch, numpy and the standard library are not
followed, and a global bound to one of their modules (``T``, ``torch``) is compared by the
module's identity alone: ``T.Kernel`` and ``T.float32`` are the library's, not the user's to
rebind.
"""

from __future__ import annotations

import builtins
import dis
import types

_CONSTANTS = (type(None), bool, int, float, complex, str, bytes)
_MAX_ITEMS = 256
_DEPTH = 3
_SKIP_MODULES = ("tilewright", "tvm", "tvm_ffi", "torch", "numpy", "builtins")
_ATTRS = ("LOAD_ATTR", "LOAD_METHOD")


def _chains(code: types.CodeType) -> set[tuple[str, ...]]:
    """Global names ``code`` (and the code nested in it) loads, each with the attributes read
    straight off it."""
    found: set[tuple[str, ...]] = set()
    pending = [code]
    while pending:
        co = pending.pop()
        instructions = list(dis.get_instructions(co))
        for i, ins in enumerate(instructions):
            if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
                continue
            chain = [ins.argval]
            j = i + 1
            while j < len(instructions) and instructions[j].opname in _ATTRS:
                chain.append(instructions[j].argval)
                j += 1
            found.add(tuple(chain))
        pending.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
    return found


def _frozen(value, budget: list):
    """``value`` as something comparable by value, or its identity."""
    if isinstance(value, _CONSTANTS):
        return value
    if isinstance(value, (tuple, list, set, frozenset, dict)) and budget[0] > 0:
        budget[0] -= len(value)
        if budget[0] < 0:
            return ("id", id(value))
        if isinstance(value, dict):
            return ("dict", tuple((_frozen(k, budget), _frozen(v, budget))
                                  for k, v in value.items()))
        items = tuple(_frozen(v, budget) for v in value)
        return (type(value).__name__, tuple(sorted(items, key=repr)) if
                isinstance(value, (set, frozenset)) else items)
    return ("id", id(value))


def _is_library(value) -> bool:
    """Whether ``value`` is a module of the libraries whose names are taken as fixed."""
    return isinstance(value, types.ModuleType) and \
        value.__name__.split(".")[0] in _SKIP_MODULES


def _followed(value):
    """The plain Python function behind ``value`` if its globals should be read too."""
    fn = getattr(value, "fn", None) if not isinstance(value, types.FunctionType) else value
    if not isinstance(fn, types.FunctionType):
        return None
    module = (fn.__module__ or "").split(".")[0]
    return None if module in _SKIP_MODULES else fn


class Reads:
    """The outside values ``fn`` reads; :meth:`snapshot` is a hashable picture of them."""

    def __init__(self, fn):
        self.fn = fn
        self._plan: list | None = None

    def _functions(self) -> list[types.FunctionType]:
        """``fn`` and the functions it reaches, at most :data:`_DEPTH` calls deep."""
        seen, out, level = set(), [], [self.fn]
        for _ in range(_DEPTH + 1):
            following = []
            for fn in level:
                if id(fn) in seen:
                    continue
                seen.add(id(fn))
                out.append(fn)
                for chain in _chains(fn.__code__):
                    value = fn.__globals__.get(chain[0])
                    target = _followed(value)
                    if target is not None:
                        following.append(target)
                for cell in fn.__closure__ or ():
                    try:
                        target = _followed(cell.cell_contents)
                    except ValueError:  # an empty cell
                        continue
                    if target is not None:
                        following.append(target)
            level = following
        return out

    def library_only(self) -> bool:
        """Whether every value read is a module of tilewright, TVM, torch or numpy or read
        from one (``T.Kernel``, ``T.float32``) and no closure cell is read: nothing a program
        rebinds between calls, so the snapshot does not change and the kernel a call compiles
        to depends on its arguments alone. A name not bound yet counts as outside."""
        self._build_plan()
        for fn, roots in self._plan:
            if fn.__closure__:
                return False
            for root, _ in roots:
                if root not in fn.__globals__ and hasattr(builtins, root):
                    continue
                if not _is_library(fn.__globals__.get(root)):
                    return False
        return True

    def _build_plan(self) -> None:
        if self._plan is None:
            self._plan = [(fn, self._roots(fn)) for fn in self._functions()]

    def _roots(self, fn) -> list[tuple[str, list[tuple[str, ...]]]]:
        """The global names ``fn`` loads, each with the chains of attributes read from it."""
        roots: dict[str, list] = {}
        for chain in sorted(_chains(fn.__code__)):
            roots.setdefault(chain[0], []).append(chain)
        return list(roots.items())

    def snapshot(self) -> tuple:
        """A hashable picture of the values read: runs on every call of an eager kernel."""
        self._build_plan()
        budget = [_MAX_ITEMS * 16]
        picture = []
        for fn, roots in self._plan:
            scope = fn.__globals__
            for root, chains in roots:
                if root in scope:
                    value = scope[root]
                elif hasattr(builtins, root):
                    continue
                else:
                    picture.append((root, "unbound"))
                    continue
                if _is_library(value):
                    picture.append((root, "id", id(value)))
                    continue
                self._read_chains(value, chains, budget, picture)
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                try:
                    picture.append((("<cell>", name), _frozen(cell.cell_contents, budget)))
                except ValueError:
                    picture.append((("<cell>", name), "empty"))
        return tuple(picture)

    @staticmethod
    def _read_chains(root, chains, budget: list, picture: list) -> None:
        """Each chain's value read from the global's value ``root``, added to ``picture``."""
        for chain in chains:
            value = root
            for attr in chain[1:]:
                if isinstance(value, _CONSTANTS):
                    break
                try:
                    value = getattr(value, attr)
                except Exception:  # noqa: BLE001 - a property may raise anything
                    value = ("unreadable", attr)
                    break
            picture.append((chain, _frozen(value, budget)))


__all__ = ["Reads"]
