"""Turn a kernel's Python body into code that builds IR while it runs.

Most of a kernel body runs as ordinary Python: indexing builds loads, ``with T.Kernel`` opens a
frame, calls to tile ops emit statements. Some constructs need help, so the function's AST is
rewritten (line numbers kept, so errors and tracebacks point at the user's source):

- ``for x in ITER`` iterates ``__tw__.loop(ITER)``: a tile loop (``T.Parallel``, ``T.serial``,
  ``range`` ...) runs its body once with symbolic loop variables and becomes an IR loop;
  any other iterable is unrolled by Python.
- ``if COND`` asks ``__tw__.branch(COND)``: a Python truth value picks a branch now; a
  symbolic condition runs both bodies, each inside a branch frame of an IR ``if``.
- ``NAME: ANNOTATION`` (no value) declares a kernel parameter in the eager style.
- ``A and B`` / ``A or B`` call ``__tw__.all_of`` / ``__tw__.any_of`` with the later operands
  as thunks: Python values short-circuit as usual, symbolic ones build an IR ``And``/``Or``;
  ``not A`` calls ``__tw__.not_of`` (an IR ``Not`` for a symbolic value).
- ``A if C else B`` calls ``__tw__.choose(C, lambda: A, lambda: B)``: a Python truth value
  picks one as usual; a symbolic one is ``T.if_then_else(C, A, B)``.
- ``A // B`` and ``A % B`` call ``__tw__.floordiv`` / ``__tw__.floormod``, which refuse float
  operands at the user's line (TIR's floor division is for integers); ``A + B``, ``A - B``,
  ``A * B`` and ``A << B`` call ``__tw__.arith``, which folds two constants of a wrapping
  integer type to the wrapped constant (TVM stops on ``T.uint8(0) - T.uint8(1)``) and is the
  operator otherwise.
- ``while COND`` asks ``__tw__.while_loop(COND)``: a Python truth value runs a Python loop
  (re-evaluating the condition each time); a symbolic one runs the body once inside a frame
  that becomes an IR ``while`` loop. A body with ``break`` or ``continue`` needs a condition
  known at compile time.
- ``break`` / ``continue`` of a ``for`` loop: in a Python loop (unrolled while tracing) they
  are Python's, and refused under a run-time condition (``__tw__.python_jump``); in a tile loop
  (``T.serial``, ``range`` in a kernel) they set the loop's flag (``__tw__.jump``), and the
  statements after each jump point run only while the flag is clear (``frames.JumpLoop``).
- ``return`` first calls ``__tw__.returning(depth)`` with the builder's frame depth at the
  function's start, which refuses it inside a frame the function opened other than a
  ``with T.Kernel`` block (a loop, a run-time branch: ``frames.returning``).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import linecache
import textwrap
from types import FunctionType

from ..errors import TilewrightError

HELPER = "__tw__"
# the binary operators whose constants of a wrapping integer type the helpers fold
# (math.arith)
_FOLDED = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.LShift: "<<"}
_BITWISE = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.RShift: ">>"}
_BODY = "_tw_body"
_ENTRY = "_tw_entry"  # the builder's frame depth when the function starts (see visit_Return)


class _Rewriter(ast.NodeTransformer):
    def __init__(self):
        self.depth = 0
        self.returns = False

    def visit_FunctionDef(self, node: ast.FunctionDef):
        self.depth += 1
        try:
            if self.depth > 1:
                return node  # nested helpers keep plain Python semantics
            node.decorator_list = []
            self.generic_visit(node)
            if self.returns:
                entry = ast.Assign([ast.Name(_ENTRY, ast.Store())],
                                   self._helper("frame_depth", node=node))
                node.body.insert(0, ast.fix_missing_locations(ast.copy_location(entry, node)))
            return node
        finally:
            self.depth -= 1

    def visit_Return(self, node: ast.Return):
        # __tw__.returning(_tw_entry); return VALUE
        self.generic_visit(node)
        self.returns = True
        check = ast.Expr(self._helper("returning", ast.Name(_ENTRY, ast.Load()), node=node))
        return [ast.fix_missing_locations(ast.copy_location(check, node)), node]

    def _helper(self, name: str, *args, node) -> ast.Call:
        call = ast.Call(ast.Attribute(ast.Name(HELPER, ast.Load()), name, ast.Load()),
                        list(args), [])
        return ast.copy_location(call, node)

    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            it = ast.copy_location(ast.Call(ast.Attribute(ast.Name(HELPER, ast.Load()), "range",
                                                          ast.Load()), it.args, it.keywords), it)
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        names = [t.id if isinstance(t, ast.Name) else "i" for t in targets]
        if not _jumps_out(node.body):
            node.iter = self._helper("loop", it, ast.Constant(tuple(names)), node=node.iter)
            return node
        # a body with break/continue is kept twice:
        # _tw_for = __tw__.jump_loop(ITER, NAMES)
        # if _tw_for.symbolic:                  # a tile loop: the jumps set its flag
        #     for TARGET in _tw_for: BODY'      # break -> __tw__.jump(_tw_for, "break")
        #     ORELSE' (guarded by the flag)
        # else:                                 # a Python loop: Python's own jumps
        #     for TARGET in _tw_for.python(): BODY   # break -> __tw__.python_jump(_tw_for); break
        #     else: ORELSE
        name = f"_tw_for_{node.lineno}_{node.col_offset}"
        first = ast.Assign([ast.Name(name, ast.Store())],
                           self._helper("jump_loop", it, ast.Constant(tuple(names)),
                                        node=node.iter))
        tile_body = _JumpsToFlag(name, symbolic=True).visit_body(copy.deepcopy(node.body))
        python_body = _JumpsToFlag(name, symbolic=False).visit_body(node.body)
        tile = [ast.For(node.target, ast.Name(name, ast.Load()), tile_body, [])]
        if node.orelse:
            tile.append(ast.With([ast.withitem(ast.Call(ast.Attribute(
                ast.Name(name, ast.Load()), "not_broken", ast.Load()), [], []))],
                copy.deepcopy(node.orelse)))
        python_loop = ast.For(copy.deepcopy(node.target), ast.Call(ast.Attribute(
            ast.Name(name, ast.Load()), "python", ast.Load()), [], []), python_body, node.orelse)
        symbolic = ast.Attribute(ast.Name(name, ast.Load()), "symbolic", ast.Load())
        out = [first, ast.If(symbolic, tile, [python_loop])]
        return [ast.fix_missing_locations(ast.copy_location(n, node)) for n in out]

    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        # if __tw__.is_static(c := __tw__.branch(COND)):
        #     if c.value: BODY
        #     else: ORELSE
        # else:
        #     with c.then(): BODY
        #     with c.otherwise(): ORELSE
        name = f"_tw_cond_{node.lineno}_{node.col_offset}"
        store = ast.NamedExpr(ast.Name(name, ast.Store()),
                              self._helper("branch", node.test, node=node.test))
        static_test = self._helper("is_static", store, node=node.test)
        value = ast.Attribute(ast.Name(name, ast.Load()), "value", ast.Load())
        static_if = ast.If(value, node.body, node.orelse or [ast.Pass()])
        with_then = ast.With([ast.withitem(ast.Call(ast.Attribute(
            ast.Name(name, ast.Load()), "then", ast.Load()), [], []))], node.body)
        symbolic = [with_then]
        if node.orelse:
            symbolic.append(ast.With([ast.withitem(ast.Call(ast.Attribute(
                ast.Name(name, ast.Load()), "otherwise", ast.Load()), [], []))], node.orelse))
        out = ast.If(static_test, [static_if], symbolic)
        return ast.fix_missing_locations(ast.copy_location(out, node))

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                defaults=[])
        thunks = [ast.copy_location(ast.Lambda(no_args, v), v) for v in node.values[1:]]
        name = "all_of" if isinstance(node.op, ast.And) else "any_of"
        return ast.fix_missing_locations(self._helper(name, node.values[0], *thunks, node=node))

    def visit_Compare(self, node: ast.Compare):
        # `lo < x < hi`: Python's `lo < x and x < hi` (its `and` is all_of's, above)
        if len(node.ops) == 1:
            self.generic_visit(node)
            return node
        operands = [node.left, *node.comparators]
        pairs = [ast.copy_location(ast.Compare(a, [op], [b]), node)
                 for a, op, b in zip(operands, node.ops, operands[1:])]
        return self.visit_BoolOp(ast.copy_location(ast.BoolOp(ast.And(), pairs), node))

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                defaults=[])
        thunks = [ast.copy_location(ast.Lambda(no_args, v), v) for v in (node.body, node.orelse)]
        return ast.fix_missing_locations(self._helper("choose", node.test, *thunks, node=node))

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return self._helper("not_of", node.operand, node=node)
        if isinstance(node.op, ast.USub):
            return self._helper("negate", node.operand, node=node)
        if isinstance(node.op, ast.Invert):
            return self._helper("bitwise", ast.Constant("~"), node.operand, node=node)
        return node

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            name = "floordiv" if isinstance(node.op, ast.FloorDiv) else "floormod"
            return self._helper(name, node.left, node.right, node=node)
        op = _FOLDED.get(type(node.op))
        if op is not None:
            return self._helper("arith", ast.Constant(op), node.left, node.right, node=node)
        op = _BITWISE.get(type(node.op))
        if op is not None:
            return self._helper("bitwise", ast.Constant(op), node.left, node.right, node=node)
        return node

    def visit_Assert(self, node: ast.Assert):
        # assert COND, MSG -> __tw__.check(COND, lambda: MSG): Python's assert of a Python
        # value (the message evaluated on failure only), T.device_assert of a run-time one
        self.generic_visit(node)
        no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                defaults=[])
        message = ast.Lambda(no_args, node.msg if node.msg is not None else ast.Constant(None))
        call = self._helper("check", node.test, ast.copy_location(message, node), node=node)
        return ast.fix_missing_locations(ast.copy_location(ast.Expr(call), node))

    def visit_Expr(self, node: ast.Expr):
        # a bare expression (a call): __tw__.statement(VALUE) evaluates one with an effect
        self.generic_visit(node)
        if not isinstance(node.value, ast.Constant):  # a docstring stays
            node.value = self._helper("statement", node.value, node=node.value)
        return node

    def visit_Assign(self, node: ast.Assign):
        # `x = v`: stores into x when x is a T.alloc_var scalar; names a fresh allocation
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            node.value = self._helper("assign", ast.Constant(name), self._lookup(name),
                                      node.value, node=node.value)
        return node

    def _lookup(self, name: str) -> ast.expr:
        return ast.Call(ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []), "get",
                                      ast.Load()), [ast.Constant(name)], [])

    def visit_While(self, node: ast.While):
        self.generic_visit(node)
        if _jumps_out(node.body):
            # break/continue need a Python loop: the condition must be known now
            # _tw_while = __tw__.jump_loop(None, ())
            # while __tw__.static_condition(COND): BODY   # break -> python_jump(...); break
            name = f"_tw_while_{node.lineno}_{node.col_offset}"
            first = ast.Assign([ast.Name(name, ast.Store())],
                               self._helper("jump_loop", ast.Constant(None), ast.Constant(()),
                                            node=node))
            node.test = self._helper("static_condition", node.test, node=node.test)
            node.body = _JumpsToFlag(name, symbolic=False).visit_body(node.body)
            return [ast.fix_missing_locations(ast.copy_location(first, node)), node]
        # _tw_while = __tw__.while_loop(COND)
        # if _tw_while.symbolic:
        #     with _tw_while: BODY          # one IR while loop
        #     ORELSE
        # else:
        #     while _tw_while.again(lambda: COND): BODY
        #     else: ORELSE
        name = f"_tw_while_{node.lineno}_{node.col_offset}"
        first = ast.Assign([ast.Name(name, ast.Store())],
                           self._helper("while_loop", node.test, node=node.test))
        no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                defaults=[])
        again = ast.Call(ast.Attribute(ast.Name(name, ast.Load()), "again", ast.Load()),
                         [ast.Lambda(no_args, node.test)], [])
        python_loop = ast.While(again, node.body, node.orelse)
        ir_loop = [ast.With([ast.withitem(ast.Name(name, ast.Load()))], node.body),
                   *node.orelse]
        symbolic = ast.Attribute(ast.Name(name, ast.Load()), "symbolic", ast.Load())
        out = [first, ast.If(symbolic, ir_loop, [python_loop])]
        return [ast.fix_missing_locations(ast.copy_location(n, node)) for n in out]

    def visit_AnnAssign(self, node: ast.AnnAssign):
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        name = node.target.id
        lookup = self._lookup(name)
        value = node.value if node.value is not None else ast.Constant(None)
        call = self._helper("annotate", ast.Constant(name), lookup, node.annotation, value,
                            node=node)
        return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], call), node)

    def visit_With(self, node: ast.With):
        self.generic_visit(node)
        # `with T.Kernel(n) as (bx)` and `as bx` both mean the single block index
        for item in node.items:
            if isinstance(item.optional_vars, ast.Name):
                item.context_expr = self._helper("single_target", item.context_expr,
                                                 node=item.context_expr)
        return node


class _JumpsToFlag(ast.NodeTransformer):
    """The ``break`` and ``continue`` statements of one loop (not of a nested loop or
    function): in a tile loop's body each becomes a call that sets the loop's flag; in a Python
    loop's body each first checks that no IR branch or loop opened since the iteration began."""

    def __init__(self, name: str, symbolic: bool):
        self.name, self.symbolic = name, symbolic

    def visit_body(self, body: list) -> list:
        out = []
        for stmt in body:
            new = self.visit(stmt)
            out.extend(new if isinstance(new, list) else [new])
        return out

    def _jump(self, node, kind: str):
        loop = ast.Name(self.name, ast.Load())
        helper = ast.Attribute(ast.Name(HELPER, ast.Load()), "jump" if self.symbolic else
                               "python_jump", ast.Load())
        call = ast.copy_location(ast.Expr(ast.Call(helper, [loop, ast.Constant(kind)], [])), node)
        return call if self.symbolic else [call, node]

    def visit_Break(self, node):
        return self._jump(node, "break")

    def visit_Continue(self, node):
        return self._jump(node, "continue")

    def visit_For(self, node):
        node.orelse = self.visit_body(node.orelse)  # a loop's else belongs to the outer loop
        return node

    def visit_While(self, node):
        node.orelse = self.visit_body(node.orelse)
        return node

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _jumps_out(nodes) -> bool:
    """Whether a ``break`` or ``continue`` among ``nodes`` leaves the loop that owns them (not
    one of a nested loop or function)."""
    for node in nodes:
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if isinstance(node, (ast.For, ast.While)):
            if _jumps_out(node.orelse):
                return True
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                   ast.Lambda)) and _jumps_out(ast.iter_child_nodes(node)):
            return True
    return False


def _source_lines(code) -> tuple[list[str], int]:
    """The lines of ``code``'s definition and its first line number, read through linecache:
    ``inspect.getsourcelines`` on a code object scans every loaded module for its file, which
    takes over 100 ms once torch is imported."""
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename)
    if not lines or code.co_firstlineno > len(lines):
        raise OSError("could not get source code")
    return inspect.getblock(lines[code.co_firstlineno - 1:]), code.co_firstlineno


def _function_ast(code) -> tuple[ast.FunctionDef, str]:
    try:
        lines, first = _source_lines(code)
    except (OSError, TypeError) as exc:
        raise TilewrightError(f"cannot read the source of {code.co_name}: {exc}; kernels "
                              "must be defined in a file") from exc
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source)
    func = tree.body[0]
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TilewrightError(f"{code.co_name} is not a function definition")
    ast.increment_lineno(tree, first - 1)
    return func, code.co_filename


@functools.lru_cache(maxsize=256)
def _compiled(code):
    func, filename = _function_ast(code)
    func = _Rewriter().visit(func)
    # a name of its own, so that the body's uses of the original name (a macro calling itself)
    # reach the global -- the macro object -- as in the original, not this inner function
    func.name = _BODY
    freevars = list(code.co_freevars)
    factory = ast.FunctionDef(
        name="_tw_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(HELPER)] + [ast.arg(v) for v in freevars],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[func, ast.Return(ast.Name(func.name, ast.Load()))],
        decorator_list=[], returns=None, type_params=[])
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, filename, "exec")


def rewrite(fn: FunctionType, helper) -> FunctionType:
    """The rewritten ``fn``, bound to the same globals, closure values and defaults."""
    code = _compiled(fn.__code__)
    namespace: dict = {}
    exec(code, fn.__globals__, namespace)  # noqa: S102 - compiling the user's own kernel
    cells = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            cells.append(cell.cell_contents)
        except ValueError as exc:
            raise TilewrightError(f"{fn.__qualname__} uses {name!r} before it is "
                                  "assigned in the enclosing function") from exc
    new = namespace["_tw_factory"](helper, *cells)
    new.__code__ = new.__code__.replace(co_name=fn.__code__.co_name,
                                        co_qualname=fn.__code__.co_qualname)
    new.__name__, new.__qualname__ = fn.__name__, fn.__qualname__
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    return new
