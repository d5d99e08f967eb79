"""``gpusteward restore WORKLOAD``: undo a Kubernetes scale-down."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.domain.errors import ExecutionError
from gpusteward.runtime.config import load_settings

out = output.console()


def restore(
    workload: Annotated[
        str,
        typer.Argument(
            help="The workload as `gpusteward audit` names it: k8s:<namespace>/<kind>/<name> "
            "(deployment, statefulset, leaderworkerset or notebook); the k8s: prefix is optional."
        ),
    ],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Config file (YAML); source.kubernetes is read.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts.")] = False,
) -> None:
    """Undo a scale-down: put back the replica count gpusteward saved in the
    `gpusteward.io/original-replicas` annotation (or, for a Kubeflow Notebook, remove the
    `kubeflow-resource-stopped` annotation). Exit 1 when the workload was not stopped by gpusteward.

    Reaches the API server the way `source.kubernetes.config` says (in-cluster or a kubeconfig).
    """
    from gpusteward.integrations.kubernetes.build import restore_workload  # the k8s extra, lazily

    with exit_on_errors():
        settings = load_settings(config)
        try:
            said = restore_workload(settings.source.kubernetes, workload)
        except ExecutionError as e:
            if json_out:
                print(json.dumps({"workload": workload, "restored": False, "error": str(e)}))
                raise typer.Exit(1) from e
            fail(str(e), 1)
    if json_out:
        print(json.dumps({"workload": workload, "restored": True, "detail": said}))
        return
    out.print(said, highlight=False)
