"""The program builder's atomics (:class:`AtomicDraws`): read-modify-writes of every kind, with
or without a memory order, atomics returning the previous value, atomic loads and stores.

Blocks, the threads of a block and the iterations of a ``T.Parallel`` loop run in an order no
backend promises, so a program is drawn only where its outputs do not depend on it:

- an element that several blocks or iterations update is combined by one commutative and
  associative kind (add, max, min, or, and, xor; floats may be added in any order, which the
  error bound covers) and is read by no one;
- a previous value is read only of an element that one block's block code, one thread or one
  iteration touches (zero before), where the earlier atomics into it are that code's own, made
  in program order;
- or it is a ticket: every block or iteration adds the same 1 to one counter, so the previous
  values are ``0 .. n - 1`` in some order, and each is combined into another output by an add,
  a max or a min, which gives the same result for every order.

A memory order orders other accesses around an atomic and leaves its value alone: drawn a third
of the time, it changes no result. An atomic load or store of an element nobody else writes is
the plain load or store.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from .values import FLOAT_MAX, LIMITS, ROUNDOFF, Expr

PORTABLE_KINDS = ("add", "max", "min")
BITWISE_KINDS = ("or", "and", "xor")  # of integers
# C++'s memory orders that each kind of atomic takes
RMW_ORDERS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")
LOAD_ORDERS = ("relaxed", "consume", "acquire", "seq_cst")
STORE_ORDERS = ("relaxed", "release", "seq_cst")


def combined(kind: str, a_lo, a_hi, b_lo, b_hi) -> tuple:
    """The interval of ``kind`` (add, max, min, or, and, xor) of a value in ``[a_lo, a_hi]``
    and one in ``[b_lo, b_hi]``: a bitwise combination of integers in ``[-2**k, 2**k)`` stays
    there (``[0, 2**k)`` for non-negative ones)."""
    if kind == "add":
        return a_lo + b_lo, a_hi + b_hi
    if kind in ("max", "min"):
        f = max if kind == "max" else min
        return f(a_lo, b_lo), f(a_hi, b_hi)
    bound = 1 << max(int(abs(v)).bit_length() for v in (a_lo, a_hi, b_lo, b_hi))
    return (-bound if min(a_lo, b_lo) < 0 else 0), bound - 1


class AtomicDraws:
    """The atomics of :class:`~tilewright_sdk.fuzz.program._Builder` (a part of it)."""

    def atomic_kinds(self) -> list:
        """The read-modify-write kinds drawn into elements of the program's dtype: add, max,
        min and, of integers, or, and, xor; each where it is not avoided and the backend takes
        it for the dtype."""
        kinds = PORTABLE_KINDS + (BITWISE_KINDS if not self.floating else ())
        return [k for k in kinds if self.allowed(f"atomic_{k}") and
                self.takes(f"atomic_{k}", self.dtype)]

    def order(self, orders=RMW_ORDERS) -> str:
        """``, memory_order=...`` for an atomic a third of the time, else nothing (relaxed);
        nothing, with no draw, where memory orders are avoided."""
        if not self.allowed("atomic_memory_order") or self.draw(st.integers(0, 2)):
            return ""
        order = self.draw(st.sampled_from(orders))
        self.features |= {"atomic_memory_order", f"memory_order_{order}"}
        return f", memory_order={order!r}"

    def blocks(self) -> int:
        return math.ceil(self.M / self.bm) * math.ceil(self.N / self.bn) * max(1, self.depth)

    def atomic(self) -> None:
        """Every block applies a tile atomically to one shared output tile (zero before), as a
        whole (``T.atomic_add(Z[0, 0], t)``) or element by element in a ``T.Parallel`` loop:
        an add (floats may be added in any order), a max, a min or, of integers, an or, an and
        (zero whatever the tiles) or a xor, perhaps with a memory order."""
        kinds = self.atomic_kinds()
        if not kinds:
            return
        src = self.draw(st.sampled_from(self.squares()))
        # a kind drawn only where there is a choice: avoided, the draws are those of before
        kind = kinds[0] if len(kinds) == 1 else self.draw(st.sampled_from(kinds))
        blocks = self.blocks()
        u = ROUNDOFF.get(src.dtype, 0.0)
        if kind == "add":
            lo, hi = min(0, blocks * src.lo), max(0, blocks * src.hi)
            err = blocks * src.err + u * blocks * max(abs(lo), abs(hi))
        else:  # the extreme of zero and every block's element: exact but for the inputs' error
            lo, hi = combined(kind, 0, 0, src.lo, src.hi)
            err = src.err
        limit = FLOAT_MAX if self.floating else LIMITS[src.dtype]
        if max(abs(lo), abs(hi)) > limit or (src.dtype.startswith("uint") and lo < 0):
            return
        name = self.fresh("Z")
        if self.draw(st.booleans()):
            self.body.append(f"T.atomic_{kind}({name}[0, 0], {src.name}{self.order()})")
            self.features.add(f"atomic_{kind}_tile")
        else:
            self.body += [f"for i, j in T.Parallel({self.bm}, {self.bn}):",
                          f"    T.atomic_{kind}({name}[i, j], {src.name}[i, j]{self.order()})"]
            self.features.add(f"atomic_{kind}_element")
        self.outputs.append((name, (self.bm, self.bn), src.dtype, err))
        self.features |= {f"atomic_{kind}", f"atomic_{kind}_{src.dtype}"}

    # -- previous values ----------------------------------------------------------------------
    def atomic_prev(self) -> None:
        """Atomics returning the previous value (``T.atomic_add(V[...], v, return_prev=True)``)
        of an element only block code, one thread or one iteration touches (:meth:`prev_block`,
        :meth:`prev_thread`, :meth:`prev_parallel`), or tickets (:meth:`prev_ticket`)."""
        if not self.allowed("atomic_prev") or not self.atomic_kinds():
            return
        forms = ["block", "parallel", "ticket"]
        if any(self.scope(t) == "shared" for t in self.squares()):
            forms.append("thread")
        form = self.draw(st.sampled_from(forms))
        getattr(self, f"prev_{form}")()

    def prev_chain(self, cell: str, values: list) -> tuple | None:
        """Atomics into ``cell`` (zero before, touched by nothing else) of ``values`` (Exprs)
        in order, each returning the previous value: named and read, named and never read
        (made once where it stands all the same), a bare statement, or, the last one, written
        inside the store that reads it. Returns the statements, the previous values read (Exprs,
        an atomic's call for the last one written inside the store) and the interval and error
        of ``cell`` after them; None where a value could leave the dtype."""
        kinds = self.atomic_kinds()
        lo = hi = 0
        err = 0.0
        lines, terms = [], []
        for n, value in enumerate(values):
            kind = self.draw(st.sampled_from(kinds))
            before = Expr("", lo, hi, err, err == 0.0, frozenset({f"atomic_prev_{kind}"}))
            lo, hi = combined(kind, lo, hi, value.lo, value.hi)
            err = err + value.err + self.u * max(abs(lo), abs(hi)) if kind == "add" else \
                max(err, value.err)
            if not self.fits(lo, hi):
                return None
            call = f"T.atomic_{kind}({cell}, {value.text}, return_prev=True{self.order()})"
            uses = ["read", "read", "unused", "statement"] + \
                (["inline"] if n == len(values) - 1 else [])
            use = self.draw(st.sampled_from(uses))
            if use == "inline":
                terms.append(Expr(call, before.lo, before.hi, before.err, before.exact,
                                  before.features))
            elif use == "statement":
                lines.append(call)
            else:
                name = self.fresh("old")
                lines.append(f"{name} = {call}")
                if use == "read":
                    terms.append(Expr(name, before.lo, before.hi, before.err, before.exact,
                                      before.features))
            self.features |= {f"atomic_prev_{kind}", f"atomic_prev_{use}"} | value.features
        return lines, terms, (lo, hi, err)

    def prev_sum(self, terms: list) -> Expr | None:
        """The sum of the previous values ``terms``, each perhaps times a constant (times 0:
        the value folds away as the expression is built, the atomic is made all the same);
        None for no terms. A term that would leave the dtype is left out."""
        total = None
        for term in terms:
            k = self.draw(st.sampled_from((1, 1, 2, 0)))
            if k != 1:
                term = Expr(f"({term.text} * {self.const(k).text})", min(term.lo * k, term.hi * k),
                            max(term.lo * k, term.hi * k), term.err * k, term.exact,
                            term.features | ({"atomic_prev_folded"} if k == 0 else set()))
            if total is None:
                total = term
                continue
            lo, hi = total.lo + term.lo, total.hi + term.hi
            if self.fits(lo, hi):
                total = self.rounded(f"({total.text} + {term.text})", lo, hi,
                                     total.err + term.err, total, term)
        return total

    def prev_block(self) -> None:
        """Block code: 1 to 3 atomics returning the previous value (:meth:`prev_chain`) into an
        element only this block touches (``V[by, bx]``), of this block's first element of an
        input or a constant; an element of a second output the block owns stores the sum of
        the values read and perhaps ``T.atomic_load`` of the first element (its final
        value)."""
        first = f"[{self.z}by * {self.bm}, bx * {self.bn}]"
        values = []
        for _ in range(self.draw(st.integers(1, 3))):
            if self.draw(st.booleans()):
                name, lo, hi = self.draw(st.sampled_from(self.inputs))
                values.append(Expr(f"{name}{first}", lo, hi))
            else:
                values.append(self.const(self.draw(st.sampled_from(
                    (0.5, 1.5, -2.0, 3.0) if self.floating else
                    (1, 2, 5) if self.unsigned else (1, -3, 5)))))
        cell_name, out = self.fresh("V"), self.fresh("P")
        cell = f"{cell_name}[{self.z}by, bx]"
        chain = self.prev_chain(cell, values)
        if chain is None:
            return
        lines, terms, (lo, hi, err) = chain
        if self.allowed("atomic_load") and self.draw(st.booleans()):
            terms.append(Expr(f"T.atomic_load({cell}{self.order(LOAD_ORDERS)})", lo, hi, err,
                              err == 0.0, frozenset({"atomic_load"})))
        total = self.prev_sum(terms)
        gm, gn = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
        self.body += lines
        self.outputs.append((cell_name, self.deep((gm, gn)), self.dtype, err))
        if total is not None:
            self.body.append(f"{out}[{self.z}by, bx] = {total.text}")
            self.outputs.append((out, self.deep((gm, gn)), self.dtype, total.err))
            self.features |= total.features
        self.features |= {"atomic_prev", "atomic_prev_block"}

    def prev_parallel(self) -> None:
        """Each ``T.Parallel`` iteration: one or two atomics returning the previous value
        (:meth:`prev_chain`) into an element only it touches (``Z[by * bm + i, bx * bn + j]``)
        of expressions of the tiles; the iteration's element of a second output stores the sum
        of the values read (zero, then the first's result)."""
        values = [self.expr(self.draw(st.integers(0, 2)))
                  for _ in range(self.draw(st.integers(1, 2)))]
        cell_name, out = self.fresh("Z"), self.fresh("P")
        at = f"[{self.z}by * {self.bm} + i, bx * {self.bn} + j]"
        chain = self.prev_chain(f"{cell_name}{at}", values)
        if chain is None:
            return
        lines, terms, (_, _, err) = chain
        total = self.prev_sum(terms)
        head = self.loop_head()
        pad = " " * (len(head[-1]) - len(head[-1].lstrip()) + 4)
        stores = [f"{out}{at} = {total.text}"] if total is not None else []
        self.body += [*head, *(pad + line for line in [*lines, *stores])]
        gm, gn = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
        shape = self.deep((gm * self.bm, gn * self.bn))
        self.outputs.append((cell_name, shape, self.dtype, err))
        if total is not None:
            self.outputs.append((out, shape, self.dtype, total.err))
            self.features |= total.features
        self.features |= {"atomic_prev", "atomic_prev_parallel"}

    def prev_thread(self) -> None:
        """Thread-level code: thread ``tx < bn`` combines column ``tx`` of a shared tile into
        an element only it touches (``W[by, bx * bn + tx]``), row after row in a ``T.serial``
        loop, and stores each previous value (what the rows above combine to: a running sum,
        maximum ...), for an add perhaps with the row's element, to its own element of an
        output."""
        src = self.draw(st.sampled_from([t for t in self.squares()
                                         if self.scope(t) == "shared"]))
        kind = self.draw(st.sampled_from(self.atomic_kinds()))
        lo = hi = plo = phi = 0
        for _ in range(self.bm):  # the previous values: what 0 .. bm - 1 rows combine to
            plo, phi = min(plo, lo), max(phi, hi)
            lo, hi = combined(kind, lo, hi, src.lo, src.hi)
        err = src.err * self.bm + self.u * self.bm * max(abs(lo), abs(hi), abs(plo), abs(phi)) \
            if kind == "add" else src.err
        inclusive = kind == "add" and self.draw(st.booleans())
        if inclusive:
            plo, phi = min(plo + src.lo, lo), max(phi + src.hi, hi)
        if not (self.fits(lo, hi) and self.fits(plo, phi)):
            return
        cell_name, out = self.fresh("W"), self.fresh("Q")
        tx, r, old = self.fresh("tx"), self.fresh("r"), self.fresh("old")
        value = f"{old} + {src.name}[{r}, {tx}]" if inclusive else old
        self.body += [f"{tx} = T.get_thread_binding()",
                      f"if {tx} < {self.bn}:",
                      f"    for {r} in T.serial({self.bm}):",
                      f"        {old} = T.atomic_{kind}({cell_name}[{self.z}by, bx * {self.bn} + "
                      f"{tx}], {src.name}[{r}, {tx}], return_prev=True{self.order()})",
                      f"        {out}[{self.z}by * {self.bm} + {r}, bx * {self.bn} + {tx}] = "
                      f"{value}"]
        gm, gn = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
        self.outputs += [(cell_name, self.deep((gm, gn * self.bn)), self.dtype, err),
                         (out, self.deep((gm * self.bm, gn * self.bn)), self.dtype, err)]
        self.features |= {"atomic_prev", "atomic_prev_thread", f"atomic_prev_{kind}"}

    def prev_ticket(self) -> None:
        """Tickets: every block (block code) or every iteration of a ``T.Parallel`` loop adds
        1 to a counter (``C[0]``, zero before) and gets the previous value, a ticket ``0 ..
        n - 1`` in an order that depends on how blocks and threads run; ``a * ticket + b`` is
        combined by an add, a max or a min into a second output (the same sum, maximum and
        minimum whatever the order), from a named ticket or with the counter's atomic inside
        the value; or the ticket is named and never read, or the add a bare statement."""
        parallel = self.draw(st.booleans())
        n = self.blocks() * (self.bm * self.bn if parallel else 1)
        if n > (1 / self.u if self.floating else self.limit):  # the counter counts exactly
            return
        kinds = [k for k in PORTABLE_KINDS if k in self.atomic_kinds()]
        kind = self.draw(st.sampled_from(kinds))
        a = self.draw(st.sampled_from((1, 2) if self.unsigned else (1, 2, -1)))
        b = self.draw(st.sampled_from((0, 1)))
        vlo, vhi = sorted((b, a * (n - 1) + b))
        if kind == "add":  # every partial sum lies between these
            lo, hi = min(0, n * vlo), max(0, n * vhi)
            err = self.u * n * max(abs(lo), abs(hi))
        else:
            lo, hi = combined(kind, 0, 0, vlo, vhi)
            err = 0.0
        if not self.fits(lo, hi):
            return
        counter, out, ticket = self.fresh("C"), self.fresh("S"), self.fresh("tk")
        one, ca, cb = (self.const(v).text for v in (1, a, b))
        take = f"T.atomic_add({counter}[0], {one}, return_prev=True{self.order()})"
        use = self.draw(st.sampled_from(("combine", "combine", "nested", "unused", "statement")))
        if use == "combine":
            lines = [f"{ticket} = {take}",
                     f"T.atomic_{kind}({out}[0], {ticket} * {ca} + {cb}{self.order()})"]
        elif use == "nested":
            lines = [f"T.atomic_{kind}({out}[0], {take} * {ca} + {cb}{self.order()})"]
        else:
            lines = [f"{ticket} = {take}" if use == "unused" else take]
        if parallel:
            head = self.loop_head()
            pad = " " * (len(head[-1]) - len(head[-1].lstrip()) + 4)
            lines = [*head, *(pad + line for line in lines)]
        self.body += lines
        self.outputs.append((counter, (1,), self.dtype, 0.0))
        if use in ("combine", "nested"):
            self.outputs.append((out, (1,), self.dtype, err))
        self.features |= {"atomic_prev", "atomic_prev_ticket", f"atomic_prev_ticket_{use}",
                          f"atomic_prev_ticket_{'parallel' if parallel else 'block'}"}

    # -- loads and stores -----------------------------------------------------------------------
    def atomic_load(self, text: str) -> str:
        """``text`` (an element of an input) read by ``T.atomic_load`` a quarter of the time;
        no draw where atomic loads are avoided."""
        if not self.allowed("atomic_load") or self.draw(st.integers(0, 3)):
            return text
        self.features.add("atomic_load")
        return f"T.atomic_load({text}{self.order(LOAD_ORDERS)})"

    def store(self, element: str, value: str) -> str:
        """The store of ``value`` into ``element``, by ``T.atomic_store`` a third of the time;
        the plain store, with no draw, where atomic stores are avoided."""
        if not self.allowed("atomic_store") or self.draw(st.integers(0, 2)):
            return f"{element} = {value}"
        self.features.add("atomic_store")
        return f"T.atomic_store({element}, {value}{self.order(STORE_ORDERS)})"
