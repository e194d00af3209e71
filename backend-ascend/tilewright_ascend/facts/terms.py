"""IR statements in the terms of the language a kernel is written in, for error messages: a
refusal names the construct the user wrote (its line comes with the message), not the IR
node the frontend made of it."""

from __future__ import annotations

# IR statement -> what the user wrote
STATEMENTS = {
    "Evaluate": "an expression statement (a call whose value is not stored)",
    "BufferStore": "an element store",
    "Bind": "a name bound to a value",
    "For": "a loop",
    "While": "a while loop",
    "IfThenElse": "an if statement",
    "AllocBuffer": "a buffer allocation",
    "AttrStmt": "a scope (T.Scope, T.SimdVF, T.SimtVF, an annotation)",
    "SeqStmt": "a sequence of statements",
    "AssertStmt": "an assertion",
}


def statement_term(stmt) -> str:
    """``stmt`` in the language's terms (its IR kind in parentheses where no term is known)."""
    kind = type(stmt).__name__
    return STATEMENTS.get(kind, f"this statement ({kind})")
