"""The published names of the two lifecycle policies, in pytriton.server.lifecycle and pytriton.triton."""

from __future__ import annotations

import pytriton.triton
from pytriton.server.lifecycle import (
    DEFAULT_LIFECYCLE_POLICY,
    VERTEX_AI_LIFECYCLE_POLICY,
    DefaultTritonLifecyclePolicy,
    TritonLifecyclePolicy,
    VertextAILifecyclePolicy,
    choose_policy,
)


def test_the_published_names_are_the_policies_the_library_chooses():
    assert DefaultTritonLifecyclePolicy is DEFAULT_LIFECYCLE_POLICY is choose_policy(None, False)
    assert VertextAILifecyclePolicy is VERTEX_AI_LIFECYCLE_POLICY is choose_policy(None, True)


def test_their_published_values():
    assert DefaultTritonLifecyclePolicy == TritonLifecyclePolicy(launch_triton_on_startup=True, local_model_store=False)
    assert VertextAILifecyclePolicy == TritonLifecyclePolicy(launch_triton_on_startup=False, local_model_store=True)


def test_pytriton_triton_exports_them():
    from pytriton.triton import DefaultTritonLifecyclePolicy as default
    from pytriton.triton import VertextAILifecyclePolicy as vertex

    assert default is DEFAULT_LIFECYCLE_POLICY and vertex is VERTEX_AI_LIFECYCLE_POLICY
    assert {"DefaultTritonLifecyclePolicy", "VertextAILifecyclePolicy"} <= set(pytriton.triton.__all__)
    assert all(hasattr(pytriton.triton, name) for name in pytriton.triton.__all__)
