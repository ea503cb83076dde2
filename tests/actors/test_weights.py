"""The WeightStore on real Ray: exact round trips, readers on other actors, version order, zero copy."""

import pickle
import warnings

import numpy as np
import pytest
import ray
import torch

from rlsys.actors.weight_store import WeightStore, pull_if_newer
from rlsys.policies.weights import PackedStateDict, pack_state_dict


def state_dict() -> dict:
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 10, generator=g)
    return {
        "f32": torch.randn(4, 5, generator=g),
        "bf16": torch.randn(3, 7, generator=g).to(torch.bfloat16),
        "f16": torch.randn(8, generator=g).to(torch.float16),
        "i64": torch.arange(-5, 6, dtype=torch.int64) * (1 << 40),
        "scalar": torch.tensor(3.25),
        "scalar_bf16": torch.tensor(-1.5, dtype=torch.bfloat16),
        "transposed": wide.t(),  # non-contiguous
        "strided": wide[:, ::3],  # non-contiguous, offset into a shared storage
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
        "grad": torch.ones(2, 2, requires_grad=True),
        "not_a_tensor": {"step": 7},
    }


def assert_identical(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key, want in a.items():
        got = b[key]
        if not isinstance(want, torch.Tensor):
            assert got == want, key
            continue
        assert isinstance(got, torch.Tensor), key
        assert got.dtype == want.dtype and got.shape == want.shape, key
        assert torch.equal(got, want.detach()), key  # exact: bit-for-bit for floats of the same dtype


def test_pack_round_trip_is_exact_without_ray():
    state = state_dict()
    back = pickle.loads(pickle.dumps(pack_state_dict(state), protocol=5))
    assert_identical(state, back)


def test_packed_state_holds_numpy_arrays_and_keeps_tied_weights_tied():
    tied = torch.randn(5, 3)
    packed = pack_state_dict({"emb": tied, "head": tied.detach(), "bf16": tied.to(torch.bfloat16)})
    assert isinstance(packed, PackedStateDict)
    arrays = [value for _, value, _ in packed.entries]
    assert all(isinstance(a, np.ndarray) for a in arrays)
    assert arrays[0] is arrays[1]  # one buffer for both names
    assert arrays[2].dtype == np.int16  # bfloat16 travels as its bit pattern
    back = pickle.loads(pickle.dumps(packed, protocol=5))
    assert back["emb"].data_ptr() == back["head"].data_ptr()


def test_store_round_trip_is_exact(ray_session):
    store = ray.remote(WeightStore).remote()
    state = state_dict()
    assert pull_if_newer(store, -1) is None  # nothing published yet
    ray.get(store.publish.remote(0, state))
    version, back = pull_if_newer(store, -1)
    assert version == 0
    assert_identical(state, back)
    assert pull_if_newer(store, 0) is None  # not newer
    # the ref get_if_newer hands out (what the inference server awaits) gives the same tensors
    _, (ref,) = ray.get(store.get_if_newer.remote(-1))
    assert_identical(state, ray.get(ref))


def test_store_accepts_a_packed_state_dict(ray_session):
    store = ray.remote(WeightStore).remote()
    state = state_dict()
    ray.get(store.publish.remote(0, pack_state_dict(state)))  # what a publisher should send
    version, back = pull_if_newer(store, -1)
    assert version == 0
    assert_identical(state, back)


@ray.remote(num_cpus=0.01)
class Reader:
    def __init__(self, store):
        self.store = store
        self.held = []

    def pull(self, version: int):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the read-only warning must be handled, not leak
            found = pull_if_newer(self.store, version)
        if found is None:
            return None
        self.held.append(found[1])
        return found

    def same_memory_on_second_pull(self) -> list[str]:
        """Keys whose tensors from two pulls of the same version share memory (a copying
        transport gives every get its own buffers)."""
        first = pull_if_newer(self.store, -1)[1]
        second = pull_if_newer(self.store, -1)[1]
        return [k for k, v in first.items() if isinstance(v, torch.Tensor) and v.data_ptr() == second[k].data_ptr()]

    def shared_mapping(self, key: str) -> str:
        """The /proc/self/maps line of the memory the pulled tensor lives in."""
        tensor = pull_if_newer(self.store, -1)[1][key]
        address = tensor.data_ptr()
        with open("/proc/self/maps") as maps:
            for line in maps:
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                if low <= address < high:
                    return line.strip()
        return ""


def test_reader_on_another_actor_gets_identical_values_and_newer_versions(ray_session):
    store = ray.remote(WeightStore).remote()
    reader = Reader.remote(store)
    state = state_dict()
    ray.get(store.publish.remote(3, state))
    version, back = ray.get(reader.pull.remote(-1))
    assert version == 3
    assert_identical(state, back)
    assert ray.get(reader.pull.remote(3)) is None

    newer = {k: v + 1 if isinstance(v, torch.Tensor) and v.dtype != torch.bool else v for k, v in state.items()}
    ray.get(store.publish.remote(4, newer))
    version, back = ray.get(reader.pull.remote(3))
    assert version == 4
    assert_identical(newer, back)
    ray.kill(reader)


def test_versions_must_increase(ray_session):
    store = ray.remote(WeightStore).remote()
    ray.get(store.publish.remote(2, {"w": torch.ones(2)}))
    for stale in (2, 1, -1):
        with pytest.raises(ValueError, match="not newer"):
            ray.get(store.publish.remote(stale, {"w": torch.zeros(2)}))
    assert ray.get(store.get_version.remote()) == 2
    version, back = pull_if_newer(store, -1)
    assert version == 2 and torch.equal(back["w"], torch.ones(2))  # the rejected publish changed nothing


def test_pulled_weights_are_zero_copy_views_of_shared_memory(ray_session):
    store = ray.remote(WeightStore).remote()
    reader = Reader.remote(store)
    big = {"w": torch.randn(1 << 20), "bf16": torch.randn(1 << 20).to(torch.bfloat16), "tiny": torch.ones(3)}
    ray.get(store.publish.remote(0, big))
    # Two pulls of one version in one process return the same memory; pickled torch tensors are
    # deserialised into a new private buffer on every get.
    assert set(ray.get(reader.same_memory_on_second_pull.remote())) >= {"w", "bf16"}
    # and that memory is a shared mapping (the object store's), not the reader's private heap
    mapping = ray.get(reader.shared_mapping.remote("w"))
    assert mapping, "the tensor's address is in no mapping"
    assert mapping.split()[1][3] == "s", mapping
    ray.kill(reader)
