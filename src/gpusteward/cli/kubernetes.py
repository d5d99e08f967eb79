"""``gpusteward restore WORKLOAD``: undo a Kubernetes scale-down, or a cloud instance's stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.domain.errors import ExecutionError
from gpusteward.runtime.config import Settings, load_settings

out = output.console()


def restore(
    workload: Annotated[
        str,
        typer.Argument(
            help="The workload as `gpusteward audit` names it: k8s:<namespace>/<kind>/<name> "
            "(deployment, statefulset, leaderworkerset or notebook; the k8s: prefix is optional), "
            "or node/<instance-id> or node/<node name> for a cloud instance gpusteward stopped."
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (YAML); source.kubernetes or cloud is read."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts.")] = False,
) -> None:
    """Undo a scale-down: put back the replica count gpusteward saved in the
    `gpusteward.io/original-replicas` annotation (or, for a Kubeflow Notebook, remove the
    `kubeflow-resource-stopped` annotation). Exit 1 when the workload was not stopped by gpusteward.

    Reaches the API server the way `source.kubernetes.config` says (in-cluster or a kubeconfig).
    A `node/...` target goes to the cloud (`cloud.aws`): the instance is started (and returned
    to service in its Auto Scaling group), or its group's desired capacity raised back, from
    what the stop recorded in the instance's or group's tags.
    """
    with exit_on_errors():
        settings = load_settings(config)
        try:
            said = _restore(settings, workload)
        except ExecutionError as e:
            if json_out:
                print(json.dumps({"workload": workload, "restored": False, "error": str(e)}))
                raise typer.Exit(1) from e
            fail(str(e), 1)
    if json_out:
        print(json.dumps({"workload": workload, "restored": True, "detail": said}))
        return
    out.print(said, highlight=False)


def _restore(settings: Settings, workload: str) -> str:
    if workload.startswith("node/"):
        from gpusteward.integrations.cloud.build import restore_instance  # the cloud extra, lazily

        return restore_instance(settings.cloud, workload)
    from gpusteward.integrations.kubernetes.build import restore_workload  # the k8s extra, lazily

    return restore_workload(settings.source.kubernetes, workload)
