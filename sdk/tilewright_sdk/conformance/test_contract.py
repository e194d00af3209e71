"""Contract tests: what every backend must satisfy, whatever it supports."""

import dataclasses

import pytest

from .contract import (
    check_arch_models,
    check_capabilities,
    check_declarations,
    check_executors,
    check_hook_declarations,
    check_phases_visible,
    check_target_claims,
    check_target_declarations,
    check_timers,
    check_unsupported_dtype_message,
    check_unsupported_message,
)


def test_declarations_validate(tilewright_backend):
    check_declarations(tilewright_backend)


def test_capabilities_name_known_ops_and_dtypes(tilewright_backend):
    check_capabilities(tilewright_backend)


def test_claims_its_targets_alone(tilewright_backend):
    check_target_claims(tilewright_backend)


def test_declares_its_targets(tilewright_backend):
    check_target_declarations(tilewright_backend)


def test_declares_its_hooks(tilewright_backend):
    check_hook_declarations(tilewright_backend)


def test_executors_explain_unavailability(tilewright_backend):
    check_executors(tilewright_backend)


def test_phases_are_named_and_instrumented(tilewright_backend):
    check_phases_visible(tilewright_backend)


def test_unsupported_op_is_one_sentence(tilewright_backend):
    check_unsupported_message(tilewright_backend)


def test_unsupported_dtype_is_refused_at_the_users_line(tilewright_backend):
    check_unsupported_dtype_message(tilewright_backend)


def test_timers_register(tilewright_conformance, tilewright_backend):
    check_timers(tilewright_backend)


def test_arch_models_register(tilewright_conformance, tilewright_backend):
    check_arch_models(tilewright_backend)


def test_backend_is_frozen(tilewright_backend):
    with pytest.raises(dataclasses.FrozenInstanceError):
        tilewright_backend.name = "renamed"
