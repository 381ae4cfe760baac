"""What the `tf` framework (1.2) lacks for Coder's schema, added by extension rather than by patching it.

- `ListNestedBlock`: Coder's `option`, `item` and `metadata` blocks are ordered lists; `tf` only offers Set and
  Single nesting, and a set would let Terraform reorder a parameter's options.
- `SetNestedBlock`: the real provider declares some single blocks (`coder_ai_task.sidebar_app`,
  `coder_workspace_preset.prebuilds`) as sets of at most one; `tf`'s own NestedBlock is abstract.
- `ObjectType`: `coder_workspace_owner.rbac_roles` is a list of objects; `tf` has no object type.
- `CoderProviderServicer`: the base servicer only lets a resource shape its plan on update. We also need it on
  create (computed attributes inside nested blocks, such as `item.is_null`, must be known or unknown in the plan,
  never null) and we must answer destroy plans, which the base servicer rejects although it announces them.
- `serve`: `tf.runner.run_provider` hard-wires the base servicer, so this is its loop with ours in place.
- `read_refined_unknowns`: Terraform 1.6+ sends refined unknowns, which `tf` reads as raw msgpack extensions.
- `known_blocks` / `restore_unknown_blocks`: `tf` hands validation and plans the raw values, in which a whole nested
  block list can be unknown (a `dynamic` block whose `for_each` is not known yet, as in every registry region
  picker inside a module); our checks see every block as a list of the instances known so far.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any

from tf import utils as tf_utils
from tf.gen import tfplugin_pb2 as pb
from tf.iface import PlanContext, Provider
from tf.provider import ProviderServicer, _decode_state, _encode_state, _encode_state_d
from tf.schema import Block, NestedBlock, NestMode
from tf.types import TfType, Unknown
from tf.utils import Diagnostics, read_dynamic_value

# Coder's names allow no underscores since 2025-02; the same rule applies to agent names and app slugs.
NAME_PATTERN = r"^[a-z0-9](-?[a-z0-9])*$"


class ListNestedBlock(NestedBlock):  # type: ignore[misc]  # tf ships no type information
    """A nested block whose instances keep the order they are written in (protocol nesting mode LIST)."""

    nesting = pb.Schema.NestedBlock.NestingMode.LIST

    def __init__(self, type_name: str, block: Block, *, min_items: int = 0, max_items: int = 0) -> None:
        # The mode passed to the base class is never used: to_pb below says ``nesting``.
        super().__init__(type_name, NestMode.Set, block, min_items=min_items, max_items=max_items)

    def to_pb(self) -> Any:
        return pb.Schema.NestedBlock(
            type_name=self.type_name,
            block=self.block.to_pb(),
            min_items=self.min_items,
            max_items=self.max_items,
            nesting=self.nesting,
        )

    def encode(self, value: Any) -> Any:
        if value is None or value is Unknown:
            return value
        return [item if item is Unknown else _encode_state_d(self._amap(), self._bmap(), item, None) for item in value]

    def decode(self, value: Any) -> Any:
        if value is None or value is Unknown:
            return value
        amap, bmap, diags = self._amap(), self._bmap(), Diagnostics()
        return [item if item is Unknown else _decode_state(diags, amap, bmap, item)[1] for item in value]

    def semantically_equal(self, a_decoded: Any, b_decoded: Any) -> bool:
        # Unlike a set, order is part of the value.
        return bool(a_decoded == b_decoded)


class SetNestedBlock(ListNestedBlock):
    """A nested block whose instances form a set (protocol nesting mode SET); on the wire a set is a list too."""

    nesting = pb.Schema.NestedBlock.NestingMode.SET

    def semantically_equal(self, a_decoded: Any, b_decoded: Any) -> bool:
        if a_decoded is None or b_decoded is None:
            return a_decoded is b_decoded
        return all(item in b_decoded for item in a_decoded) and all(item in a_decoded for item in b_decoded)


class ObjectType(TfType):  # type: ignore[misc]
    """An object with fixed attribute types, e.g. `{name = string, org_id = string}`."""

    def __init__(self, attributes: dict[str, TfType]) -> None:
        self.attributes = attributes

    def encode(self, value: Any) -> Any:
        if value is None or value is Unknown:
            return value
        return {name: kind.encode(value.get(name)) for name, kind in self.attributes.items()}

    def decode(self, value: Any) -> Any:
        if value is None or value is Unknown:
            return value
        return {name: kind.decode(value.get(name)) for name, kind in self.attributes.items()}

    def tf_type(self) -> bytes:
        members = {name: json.loads(kind.tf_type()) for name, kind in self.attributes.items()}
        return json.dumps(["object", members], separators=(",", ":")).encode()


class UnknownBlocks(list[Any]):
    """A nested block list that Terraform does not fully know yet: it holds the instances known so far (usually
    none) and the value Terraform sent (`original`), to be planned back unchanged.

    It iterates like the known instances, so a check goes over what it can check; a check whose answer depends on
    whether there are instances at all (a monitor must watch something, arguments that conflict) asks `is_known`
    first, as the real provider's SDK skips a rule over a value it cannot know. Terraform validates again during the
    plan, once module variables are known, and reads data sources only with their whole configuration known.
    """

    def __init__(self, known: Iterable[Any], original: Any) -> None:
        super().__init__(known)
        self.original = original


def known_blocks(state: dict[str, Any], block_types: Iterable[NestedBlock]) -> dict[str, Any]:
    """`state` (a configuration or a planned state) with each nested block, at any depth, read as a list of its
    instances: none when absent, an `UnknownBlocks` when the list or any instance of it is unknown."""
    shaped = dict(state)
    for block in block_types:
        value = state.get(block.type_name)
        nested = block.block.block_types
        if value is None:
            shaped[block.type_name] = []
        elif value is Unknown:
            shaped[block.type_name] = UnknownBlocks((), value)
        elif isinstance(value, dict):  # single nesting: one instance, not a list
            shaped[block.type_name] = known_blocks(value, nested)
        else:
            instances = [known_blocks(item, nested) for item in value if item is not Unknown]
            complete = len(instances) == len(value)
            shaped[block.type_name] = instances if complete else UnknownBlocks(instances, value)
    return shaped


def restore_unknown_blocks(value: Any) -> Any:
    """The inverse of `known_blocks` for a plan: an unknown block list goes back to Terraform as it came."""
    if isinstance(value, UnknownBlocks):
        return value.original
    if isinstance(value, dict):
        return {name: restore_unknown_blocks(item) for name, item in value.items()}
    if isinstance(value, list):
        return [restore_unknown_blocks(item) for item in value]
    return value


class CoderProviderServicer(ProviderServicer):  # type: ignore[misc]
    def PlanResourceChange(self, request: Any, context: Any) -> Any:
        if read_dynamic_value(request.proposed_new_state) is None:
            # A destroy plan: these resources live only in Terraform's state, so there is nothing to veto.
            return pb.PlanResourceChange.Response(planned_state=request.proposed_new_state)
        response = super().PlanResourceChange(request, context)
        if read_dynamic_value(request.prior_state) is not None or response.diagnostics:
            return response  # updates already went through the resource's plan()
        type_name = request.type_name
        attrs, blocks = self._get_res_attrs(type_name), self._get_res_blocks(type_name)
        diags = Diagnostics()
        planned_encoded, planned = _decode_state(diags, attrs, blocks, response.planned_state)
        resource = self.app.new_resource(self._get_res_cls(type_name))
        shaped = resource.plan(PlanContext(diags, type_name, changed_fields=set()), None, planned)
        return pb.PlanResourceChange.Response(
            planned_state=_encode_state(attrs, blocks, shaped, planned_encoded), diagnostics=diags.to_pb()
        )


# cty's msgpack extension for an unknown that carries refinements ("not null", "a string starting with 'code-'",
# number bounds, collection length), which Terraform 1.6+ sends for values partly known at plan time.
REFINED_UNKNOWN_EXTENSION = 12


def read_refined_unknowns() -> None:
    """Read refined unknowns as Unknown, as the plain unknown (extension 0) already is.

    `tf` 1.2 knows only extension 0 and hands any other extension to the provider as an ``ExtType``, which
    validation then checks as if it were the value ("slug ExtType(code=12, ...) must match"). The refinements only
    narrow what the value may become; the provider checks the value itself once it is known, so dropping them
    loses nothing. This belongs in `tf`'s reader (`tf.utils._msgpack_ext_hook`), which every request goes through;
    until `tf` reads them itself, the reader is wrapped here, once per provider process.
    """
    reader = tf_utils._msgpack_ext_hook
    if getattr(reader, "reads_refined_unknowns", False):
        return

    def read_extension(code: int, data: bytes) -> Any:
        return Unknown if code == REFINED_UNKNOWN_EXTENSION else reader(code, data)

    read_extension.reads_refined_unknowns = True  # type: ignore[attr-defined]
    tf_utils._msgpack_ext_hook = read_extension


def _print_handshake(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def serve(provider: Provider, announce: Callable[[str], None] | None = None) -> None:
    """Serve `provider` over go-plugin's gRPC handshake, as `tf.runner.run_provider` does (production mode).

    `announce`: where the handshake line goes (default: stdout, which Terraform reads); a child of the provider
    zygote hands it to its launcher instead."""
    read_refined_unknowns()
    import grpc  # type: ignore[import-untyped]  # no stubs installed
    from tf.gen import grpc_controller_pb2 as controller_pb
    from tf.gen import grpc_controller_pb2_grpc as controller_rpc
    from tf.gen import grpc_stdio_pb2_grpc as stdio_rpc
    from tf.gen import tfplugin_pb2_grpc as rpc
    from tf.runner import _self_signed_cert, _ShutdownInterceptor

    stopper = _ShutdownInterceptor()
    server = grpc.server(thread_pool=futures.ThreadPoolExecutor(max_workers=10), interceptors=[stopper])
    stopper.server = server
    rpc.add_ProviderServicer_to_server(CoderProviderServicer(provider), server)

    class Controller(controller_rpc.GRPCControllerServicer):  # type: ignore[misc]
        def Shutdown(self, request: Any, context: Any) -> Any:
            stopper.stopped = True
            return controller_pb.Empty()

    class Stdio(stdio_rpc.GRPCStdioServicer):  # type: ignore[misc]
        def StreamStdio(self, request: Any, context: Any) -> Any:
            return iter([])

    controller_rpc.add_GRPCControllerServicer_to_server(Controller(), server)
    stdio_rpc.add_GRPCStdioServicer_to_server(Stdio(), server)
    with tempfile.TemporaryDirectory() as directory:
        socket_path = os.path.join(directory, "plugin.sock")
        chain, credentials = _self_signed_cert()
        server.add_secure_port(f"unix://{socket_path}", credentials)
        server.start()
        # go-plugin handshake: core protocol 1, plugin protocol 6, where to dial, and our certificate.
        certificate = base64.b64encode(chain).decode().rstrip("=")
        (announce or _print_handshake)(f"1|6|unix|{socket_path}|grpc|{certificate}\n")
        try:
            # Short waits: Terraform stops many providers per run and a long wait would add up.
            while server.wait_for_termination(0.05):
                if stopper.stopped:
                    break
        except KeyboardInterrupt:
            server.stop(grace=0.5)
