"""The Terraform a template requires: its ``required_version`` constraints, read from the uploaded archive.

Read on the server, when a version is uploaded, so that its import already goes only to a daemon whose Terraform
can run it (modules fetched from elsewhere are not in the archive: Terraform itself checks theirs at init).
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Iterator

from app.core.errors import InvalidInput
from protocol.terraform_versions import ConstraintError, parse_constraints, satisfiable

# A .tf file larger than this is no configuration a person wrote: it is skipped rather than parsed.
MAX_TF_BYTES = 1024 * 1024


def required_terraform(archive: bytes) -> str | None:
    """Every ``required_version`` of the archive's .tf files (the root module and the modules it carries), joined
    into one constraint; None when there is none. InvalidInput when one does not parse, or no Terraform could
    satisfy them all."""
    # Imported here: the HCL parser is a tenth of the web server's load time, and only uploads need it.
    import hcl2
    from hcl2.utils import SerializationOptions
    from lark.exceptions import LarkError

    options = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
    found: list[tuple[str, str]] = []
    for path, text in _tf_files(archive):
        try:
            document = hcl2.loads(text, serialization_options=options)
        except (LarkError, ValueError, TypeError, AttributeError):
            continue  # the import reports syntax errors, with Terraform's own words
        for block in document.get("terraform") or []:
            value = block.get("required_version") if isinstance(block, dict) else None
            if isinstance(value, str) and value.strip():
                found.append((path, value.strip()))
    for path, value in found:
        try:
            parse_constraints(value)
        except ConstraintError as exc:
            raise InvalidInput(f"{path}: required_version = {value!r}: {exc}.") from exc
    if not found:
        return None
    joined = ", ".join(dict.fromkeys(value for _, value in found))
    if not satisfiable(joined):
        where = ", ".join(f"{path} ({value})" for path, value in found)
        raise InvalidInput(f"No Terraform satisfies this template's required_version constraints together: {where}.")
    return joined


def _tf_files(archive: bytes) -> Iterator[tuple[str, str]]:
    if zipfile.is_zipfile(io.BytesIO(archive)):
        with zipfile.ZipFile(io.BytesIO(archive)) as bundle:
            for info in bundle.infolist():
                if info.filename.endswith(".tf") and not info.is_dir() and info.file_size <= MAX_TF_BYTES:
                    yield info.filename, bundle.read(info).decode("utf-8", "replace")
        return
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as bundle:
        for member in bundle:
            if member.isfile() and member.name.endswith(".tf") and member.size <= MAX_TF_BYTES:
                extracted = bundle.extractfile(member)
                if extracted is not None:
                    yield member.name.removeprefix("./"), extracted.read().decode("utf-8", "replace")
