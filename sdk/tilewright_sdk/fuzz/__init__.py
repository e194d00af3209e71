"""Differential fuzzing of a backend against the interpreter.

``pytest --pyargs tilewright_sdk.fuzz --tilewright-backend NAME --examples N --seed S``
generates ``N`` random valid programs (Hypothesis strategies with shrinking): tile programs
(:mod:`.program`) and, a quarter of them, GEMM and FlashAttention kernels over the tile shapes
tensor cores take (:mod:`.gemm`; the counts: :func:`.gemm.fuzz_plan`). It runs each on the
interpreter and on the backend, and compares the results within each program's error bounds
(:mod:`.check`). A backend that cannot run kernels here has
each program compiled instead. A program the backend refuses at compile time with a deliberate
kernel error (an unsupported construct, named with its line) is counted as refused, not as a
failure; crashes, build failures and wrong results are failures. On a disagreement Hypothesis
shrinks the program, keeping to the kind of the first failure (a wrong result stays a wrong
result; another kind met on the way is counted in the statistics, not shrunk to), and the
smallest failing one is saved as a standalone reproducer (``--tilewright-fuzz-dir``, default
``tilewright-fuzz``). Features of bugs listed in
:mod:`tilewright_sdk.conformance.known_failures` are not generated for that backend unless
``--tilewright-fuzz-known`` is given.
"""
