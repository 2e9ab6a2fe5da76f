"""`SequenceBatcher`: checks, and Triton's ``sequence_batching`` block it becomes."""

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import ModelConfig, SequenceBatcher, Tensor
from pytriton.repository.pbtxt import model_config_proto

IO = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(1,))],
    "outputs": [Tensor(name="y", dtype=np.float32, shape=(1,))],
}


def _proto(config, count=1):
    return model_config_proto("Seq", IO["inputs"], IO["outputs"], config, count, {})


def test_direct_is_written_without_a_dynamic_batcher():
    proto = _proto(ModelConfig(max_batch_size=8, batcher=SequenceBatcher(max_sequence_idle_microseconds=5000)))
    assert proto.HasField("sequence_batching") and not proto.HasField("dynamic_batching")
    assert proto.sequence_batching.HasField("direct")
    assert proto.sequence_batching.max_sequence_idle_microseconds == 5000
    assert proto.max_batch_size == 8


def test_oldest_gets_enough_candidates_for_every_slot_by_default():
    batcher = SequenceBatcher(strategy="oldest", max_queue_delay_microseconds=100, preferred_batch_size=[4])
    proto = _proto(ModelConfig(max_batch_size=8, batcher=batcher), count=2)
    oldest = proto.sequence_batching.oldest
    assert (oldest.max_candidate_sequences, oldest.max_queue_delay_microseconds) == (16, 100)
    assert list(oldest.preferred_batch_size) == [4]


def test_a_sequence_model_may_take_no_batches():
    proto = _proto(ModelConfig(batching=False, batcher=SequenceBatcher()))
    assert proto.max_batch_size == 0 and proto.sequence_batching.HasField("direct")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SequenceBatcher(strategy="newest"), r"strategy must be one of 'direct', 'oldest', got 'newest'"),
        (lambda: SequenceBatcher(max_sequence_idle_microseconds=0), r"max_sequence_idle_microseconds must be"),
        (lambda: SequenceBatcher(max_candidate_sequences=4), r"applies to strategy='oldest' only"),
        (lambda: ModelConfig(batching=False, batcher=SequenceBatcher(strategy="oldest")), r"needs batching=True"),
        (lambda: ModelConfig(batcher=SequenceBatcher(), isolate_failures=True), r"step twice"),
        (lambda: ModelConfig(batcher="sequence"), r"DynamicBatcher or a SequenceBatcher"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(make, message):
    with pytest.raises(PyTritonBadParameterError, match=message):
        make()
