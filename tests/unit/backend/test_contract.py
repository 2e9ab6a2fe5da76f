"""pytriton/backend/contract.h is generated from pytriton/ipc/protocol.py (build_backend/contract.py):
it is fresh, the check catches a stale one, and the backend's C names every parameter and field
through it, so a renamed or moved one fails the backend's build or this test, never a request."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

from pytriton.ipc import protocol

ROOT = pathlib.Path(__file__).resolve().parents[3]
BACKEND = ROOT / "pytriton" / "backend"


def _generator():
    spec = importlib.util.spec_from_file_location("pytriton_contract", ROOT / "build_backend" / "contract.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


contract = _generator()


def _defines(text: str) -> dict:
    return dict(re.findall(r"^#define (PYT_\w+) (.+)$", text, re.MULTILINE))


def test_the_committed_header_is_what_the_protocol_gives():
    assert not contract.stale(), "regenerate with `make generate` (python build_backend/contract.py)"
    result = subprocess.run([sys.executable, str(ROOT / "build_backend" / "contract.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_stale_header_fails_the_check(tmp_path):
    header = tmp_path / "contract.h"
    moved = contract.render().replace("#define PYT_STREAM_PART_COLUMNS 4", "#define PYT_STREAM_PART_COLUMNS 5")
    header.write_text(moved)
    assert contract.stale(header)
    header.write_text(contract.render())
    assert not contract.stale(header)


def test_the_header_holds_every_parameter_kind_and_field_position():
    defines = _defines(contract.render())
    assert defines["PYT_PROTOCOL_VERSION"] == str(protocol.PROTOCOL_VERSION)
    params = {name: value for name, value in vars(protocol).items() if name.startswith("PARAM_")}
    assert {f"PYT_{name}": f'"{value}"' for name, value in params.items()}.items() <= defines.items()
    assert defines["PYT_KIND_STREAM_PART"] == str(protocol._MESSAGE_TYPES.index(protocol.StreamPart))
    # The encoded tuple is (kind, *fields): a field's place is one past its index.
    assert defines["PYT_BATCH_RESULT_INPUTS_KEPT"] == str(1 + protocol.BatchResult._fields.index("inputs_kept"))
    assert defines["PYT_WELCOME_GREETING"] == str(1 + protocol.Welcome._fields.index("greeting"))
    assert defines["PYT_INFER_BATCH_FIELDS"] == str(1 + len(protocol.InferBatch._fields))
    assert defines["PYT_COLUMN_IN_SHM"] == str(protocol.TensorColumn._fields.index("in_shm"))
    assert defines["PYT_STAMP_RESPONDED"] == str(protocol.Stamp.RESPONDED)
    encoded = protocol.encode(protocol.BatchResult(7, (None,), (), "seg", inputs_kept=True))
    import marshal

    fields = marshal.loads(encoded)
    assert fields[int(defines["PYT_BATCH_RESULT_SEGMENT"])] == "seg"
    assert fields[int(defines["PYT_BATCH_RESULT_INPUTS_KEPT"])] is True
    assert defines["PYT_ERROR_CODE_INVALID_ARG"] == str(protocol.ErrorCode.INVALID_ARG)
    coded = marshal.loads(protocol.encode(protocol.BatchResult(7, ("no",), (), "", codes=(1,))))
    assert coded[int(defines["PYT_BATCH_RESULT_CODES"])] == (protocol.ErrorCode.INVALID_ARG,)


def test_the_backend_names_parameters_and_fields_only_through_the_header():
    literal_params, bare_reads, bare_tuples = [], [], []
    for source in sorted(BACKEND.glob("*.[ch]")):
        if source.name == "contract.h":
            continue
        for number, line in enumerate(source.read_text().splitlines(), 1):
            where = f"{source.name}:{number}: {line.strip()}"
            if re.search(r'"pytriton\.\w', line):
                literal_params.append(where)
            if re.search(r"pyt_mv_item\([^,()]+, \d+\)", line):
                bare_reads.append(where)
            if re.search(r"pyt_m_tuple\([^,()]+, [3-9]\d*\)", line):  # messages and columns have 3+ fields
                bare_tuples.append(where)
    assert literal_params == [], "use PYT_PARAM_* (contract.h; add the PARAM_ to protocol.py)"
    assert bare_reads == [], "read a message's field by its PYT_<MESSAGE>_<FIELD> position"
    assert bare_tuples == [], "write a message with PYT_<MESSAGE>_FIELDS"
