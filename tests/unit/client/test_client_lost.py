"""Pure parts of ending lost requests: the chunked decoder of HTTP streams, the notices' format,
request ids, the wait slices."""

from __future__ import annotations

import json
import time

import pytest

from pytriton.client.core_stream import ChunkedDecoder
from pytriton.client.exceptions import PyTritonClientRequestLostError, PyTritonClientTimeoutError
from pytriton.client.lost import LOOK_AFTER_S, LOOK_EVERY_S, Lookout, RequestIds, is_relayed, wait_slices
from pytriton.client.model_config import ClientModelConfig
from pytriton.ipc import lost


def test_chunked_decoder_gives_the_data_whatever_the_cuts():
    raw = b"5\r\nhello\r\n1a;ext=1\r\n" + b"x" * 26 + b"\r\n0\r\n\r\n"
    for cut in range(1, len(raw)):
        decoder = ChunkedDecoder()
        data = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:])
        assert data == b"hello" + b"x" * 26 and decoder.done
    decoder = ChunkedDecoder()
    assert b"".join(decoder.feed(raw[i:i + 1]) for i in range(len(raw))) == b"hello" + b"x" * 26
    assert decoder.done


@pytest.mark.parametrize("bad", [b"zz\r\nhello\r\n", b"5\r\nhelloXX", b"\r\n"])
def test_chunked_decoder_refuses_a_malformed_body(bad):
    with pytest.raises(ValueError):
        ChunkedDecoder().feed(bad)


def _config(**parameters: str) -> ClientModelConfig:
    return ClientModelConfig(model_name="M", max_batch_size=0, backend_parameters=dict(parameters))


def test_notices_are_kept_for_a_while_and_bounded():
    config = {"name": "M", "parameters": {"other": {"string_value": "1"}}}
    first = lost.notice("M_0_0", 10, "killed by signal 9 (SIGKILL)", 1000.0, ["a-1", "a-2"])
    config = lost.with_notice(config, first, 1000.0)
    second = lost.notice("M_0_0", 11, "exited with code 1", 1050.0, ["b-1"])
    config = lost.with_notice(config, second, 1050.0)
    assert config["parameters"]["other"] == {"string_value": "1"}
    assert [n["pid"] for n in lost.notices_of(config["parameters"])] == [10, 11]
    later = lost.with_notice(config, lost.notice("M_0_0", 12, "x", 1000.0 + lost.KEPT_S + 1, ["c"]),
                             1000.0 + lost.KEPT_S + 1)
    assert [n["pid"] for n in lost.notices_of(later["parameters"])] == [11, 12]  # the first one expired
    many = lost.with_notice(config, lost.notice("M_0_0", 13, "x", 1060.0, [str(i) for i in range(lost.MAX_IDS)]),
                            1060.0)
    assert [n["pid"] for n in lost.notices_of(many["parameters"])] == [13]
    assert lost.notices_of({lost.LOST_REQUESTS_PARAMETER: "not json"}) == []


def test_the_lookout_names_only_its_own_request():
    notices = [lost.notice("M_0_0", 10, "killed by signal 9 (SIGKILL)", time.time(), ["abc-1"])]
    config = _config(**{lost.LOST_REQUESTS_PARAMETER: json.dumps(notices)})
    lookout = Lookout("M")
    reads = []

    def read(timeout_s):
        reads.append(timeout_s)
        return config

    lookout.check("abc-2", read)  # another request: nothing raised
    with pytest.raises(PyTritonClientRequestLostError, match=r"Model 'M'.*M_0_0 \(stub pid 10\) killed by signal 9"):
        lookout.check("abc-1", read)
    assert len(reads) == 1  # the second check came within LOOK_EVERY_S: no second read


def test_a_failed_read_is_no_notice():
    def read(timeout_s):
        raise PyTritonClientTimeoutError("away")

    Lookout("M").check("abc-1", read)


def test_request_ids_are_unique_per_client_and_relayed_models_are_known():
    first, second = RequestIds(), RequestIds()
    ids = {first(), first(), second()}
    assert len(ids) == 3 and all(len(one) <= lost.ID_LIMIT for one in ids)
    assert is_relayed(ClientModelConfig(model_name="M", max_batch_size=0, decoupled=True))
    assert is_relayed(_config(**{"pytriton.relayed": "1"}))
    assert not is_relayed(_config())


def test_wait_slices_look_first_after_a_second_then_twice_a_second_until_the_deadline(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("pytriton.client.lost.time.monotonic", lambda: clock[0])

    def waited(timeout_s):
        slices = []
        for wait_s in wait_slices(timeout_s):
            slices.append(wait_s)
            clock[0] += wait_s  # the caller waited the whole slice
        return slices

    assert waited(2.2) == [LOOK_AFTER_S, LOOK_EVERY_S, LOOK_EVERY_S, pytest.approx(0.2)]
    assert waited(0.3) == [pytest.approx(0.3)]


def test_a_ledger_file_reads_back_its_open_ids(tmp_path):
    from pytriton.proxy.ledger import InflightLedger

    path = str(tmp_path / "stub-1.inflight")
    ledger = InflightLedger(path)
    slots = ledger.add(["a-1", "", "b" * 100, "a-2"])  # empty and overlong ids are not recorded
    assert lost.read_ledger(path) == ["a-1", "a-2"]
    ledger.remove(slots[:1])
    more = ledger.add([f"c-{i}" for i in range(600)])  # grows past its first 256 slots
    assert sorted(lost.read_ledger(path)) == sorted(["a-2", *(f"c-{i}" for i in range(600))])
    ledger.remove(more)
    assert lost.read_ledger(path) == ["a-2"]
    ledger.close()
    assert lost.read_ledger(path) == []
