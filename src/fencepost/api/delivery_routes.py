"""Delivery targets and the deliveries of a package (issue 17; ADRs 0055, 0058).

- ``GET /v1/targets`` (``?label=key=value``, repeatable; ``?include_removed=true`` adds removed ones): targets,
  each with its newest delivery per package; an ``ETag`` (304 while unchanged), as the operator page polls it.
- ``GET /v1/targets/{name}``: one live target.
- ``POST /v1/targets`` (token): add a target (201; the same target again: 201 with the existing one).
- ``DELETE /v1/targets/{name}`` (token): remove it (its record stays, so past deliveries still name it).
- ``GET /v1/packages``: the published packages (versions, installed version, how many targets), with an ETag.
- ``GET /v1/packages/{name}/deliveries``: per target, the newest delivery: version, verdict, steps with the
  target's ledger rows, the evidence compared with the rehearsal, the reconciliation queue entry; with an ETag.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from fencepost.api import delivery_models as m
from fencepost.api.paging import conditional
from fencepost.api.routes import _NOT_MODIFIED, Ctx, Read, Write, _errors
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService, parse_labels, target_json

TargetName = Annotated[str, Path(alias="name", min_length=1, max_length=100, description="Target name.")]
PackageName = Annotated[str, Path(alias="name", min_length=1, max_length=100, description="Package name.")]

delivery = APIRouter(prefix="/v1", tags=["delivery"])


@delivery.get("/targets", response_model=m.TargetRows, dependencies=Read,
              responses={**_errors(401, 422, 503), **_NOT_MODIFIED},
              summary="List targets (live ones, those carrying every given label), each with its newest delivery "
                      "per package (ETag: 304 while unchanged)")
def list_targets(ctx: Ctx, request: Request, label: Annotated[list[str] | None, Query(
        max_length=20, description="key=value; repeatable")] = None,
                 include_removed: Annotated[bool, Query(description="Removed targets too.")] = False) -> Response:
    targets = TargetService(ctx.store).list(parse_labels(label or []), include_removed=include_removed)
    last = DeliveryService(ctx.store).last_by_target()
    return conditional(request, m.TargetRows, {"items": [
        {**target_json(t), "last_deliveries": last.get(t.id, [])} for t in targets]})


@delivery.get("/targets/{name}", response_model=m.Target, dependencies=Read,
              responses=_errors(401, 404, 422, 503), summary="One live target")
def show_target(name: TargetName, ctx: Ctx) -> dict[str, Any]:
    return target_json(TargetService(ctx.store).get(name))


@delivery.post("/targets", status_code=201, response_model=m.Target, dependencies=Write,
               responses=_errors(401, 409, 422, 503),
               summary="Add a target (sqlite:///abs/path.db; another scheme is refused, named)")
def add_target(body: m.NewTarget, ctx: Ctx) -> dict[str, Any]:
    return target_json(TargetService(ctx.store).add(body.name, body.url, parse_labels(
        f"{k}={v}" for k, v in body.labels.items())))


@delivery.delete("/targets/{name}", response_model=m.Target, dependencies=Write,
                 responses=_errors(401, 404, 422, 503), summary="Remove a target (its record stays)")
def remove_target(name: TargetName, ctx: Ctx) -> dict[str, Any]:
    return target_json(TargetService(ctx.store).remove(name))


@delivery.get("/packages", response_model=m.PackageList, dependencies=Read,
              responses={**_errors(401, 422, 503), **_NOT_MODIFIED},
              summary="The published packages: versions, installed version, how many targets (ETag: 304)")
def list_packages(ctx: Ctx, request: Request) -> Response:
    return conditional(request, m.PackageList, {"items": DeliveryService(ctx.store).packages()})


@delivery.get("/packages/{name}/deliveries", response_model=m.DeliveryList, dependencies=Read,
              responses={**_errors(401, 404, 422, 503), **_NOT_MODIFIED},
              summary="Per target, the newest delivery of a package: verdict, steps and ledger rows, evidence "
                      "(ETag: 304 while unchanged)")
def package_deliveries(name: PackageName, ctx: Ctx, request: Request) -> Response:
    return conditional(request, m.DeliveryList, {"items": DeliveryService(ctx.store).deliveries(name)})
