"""``gpusteward consolidate plan|backtest``: pack light services onto shared GPUs, from a history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpusteward.analysis.consolidation import PackSettings, plan_time_aware
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.report.charts import bar_chart
from gpusteward.runtime.config import load_settings
from gpusteward.scenarios.consolidation import backtest, backtest_summary, plan_summary, read_trace, usage_of
from gpusteward.store.files import write_text

consolidate_app = typer.Typer(
    help="Pack light services onto shared GPUs (time-slicing, MPS, MIG), planned from what they use.",
    no_args_is_help=True,
)
out = Console(soft_wrap=True)

TraceOpt = Annotated[
    Path,
    typer.Option("--trace", help="History to plan from: a trace file (generic, Philly, Helios; .gz too)."),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Config file (YAML): prices (cost).")]
ModelOpt = Annotated[
    str, typer.Option("--gpu-model", help="The GPUs' model where the trace does not say (prices, MIG).")
]
MemOpt = Annotated[
    float, typer.Option("--gpu-memory-gib", min=1, max=4096, help="Memory of one GPU of the pool (GiB).")
]
MarginOpt = Annotated[
    float, typer.Option("--memory-margin", min=0, max=0.9, help="Share of GPU memory kept free.")
]
ContentionOpt = Annotated[
    float,
    typer.Option(
        "--contention-share-max",
        min=0,
        max=1,
        help="Most share of a shared GPU's minutes that may be over 100 % utilisation in the history.",
    ),
]
MixOpt = Annotated[
    list[str] | None,
    typer.Option("--mix-team", help="A team that may share GPUs with other teams ('*': all)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts.")]


def _cfg(mem_gib: float, margin: float, contention: float, mix: list[str] | None) -> PackSettings:
    return PackSettings(
        gpu_memory_mib=mem_gib * 1024.0,
        memory_margin=margin,
        contention_share_max=contention,
        mixing_teams=frozenset(mix or ()),
    )


def chart(summary: dict[str, Any]) -> str:
    """GPUs now and after the plan, by team."""
    teams = list(summary["by_team"])
    return bar_chart(
        teams,
        {
            "now": [summary["by_team"][t]["now"] for t in teams],
            "after": [summary["by_team"][t]["after"] for t in teams],
        },
        title=f"GPUs now and after consolidation ({summary['gpus_before']} → {summary['gpus_after']})",
        unit="GPUs",
    )


@consolidate_app.command("plan")
def plan(
    trace: TraceOpt,
    config: ConfigOpt = None,
    gpu_model: ModelOpt = "",
    gpu_memory_gib: MemOpt = 80.0,
    memory_margin: MarginOpt = 0.10,
    contention_share_max: ContentionOpt = 0.005,
    mix_team: MixOpt = None,
    json_out: JsonOpt = False,
    svg: Annotated[
        Path | None, typer.Option("--svg", help="Write a chart (GPUs now vs after, by team).")
    ] = None,
) -> None:
    """Which workloads go together on which GPU, GPUs freed, money per month, the contention the
    history shows for each group, and MIG slices or smaller cards for the ones left alone. Advice:
    nothing is changed."""
    with exit_on_errors():
        prices = load_settings(config).cost
        usage, items = usage_of(read_trace(trace, gpu_model=gpu_model))
        if not items:
            fail(f"{trace}: no single-GPU workload to plan", 1)
        cfg = _cfg(gpu_memory_gib, memory_margin, contention_share_max, mix_team)
        summary = plan_summary(plan_time_aware(usage, items, cfg), items, prices, cfg, usage=usage)
        if svg is not None:
            write_text(svg, chart(summary))
    if json_out:
        print(json.dumps(summary))
        return
    table = Table(title=f"consolidation plan from {trace.name}")
    for col in ("GPU", "workloads", "mode", "peak GiB", "contended"):
        table.add_column(col, justify="right" if col in ("peak GiB", "contended") else "left")
    for i, g in enumerate(summary["groups"]):
        contended = f"{100 * g['contention_share']:.2f} %"
        table.add_row(
            str(i + 1), "\n".join(g["members"]), g["mode"], f"{g['peak_memory_gib']:.1f}", contended
        )
    out.print(table)
    if summary["groups"]:
        a = summary["groups"][0]["advice"]
        out.print(
            "How to share a GPU (advice; Kubernetes moves it through consolidation.enabled):", highlight=False
        )
        out.print(f"  Slurm: {a['slurm']}", highlight=False)
        out.print(f"  plain servers: {a['server']}", highlight=False)
    out.print(
        f"{summary['gpus_before']} GPUs → {summary['gpus_after']} ({summary['gpus_freed']} freed, "
        f"{summary['money_per_month']:,.0f} {summary['currency']} a month)",
        highlight=False,
    )
    for a in summary.get("cards", []):
        out.print(
            f"  {a['workload']}: {a['suggestion']} instead of {a['model'] or 'its GPU'} "
            f"(saves {a['saving_per_month']:,.0f} {summary['currency']} a month)",
            highlight=False,
        )


@consolidate_app.command("backtest")
def backtest_cmd(
    trace: TraceOpt,
    plan_hours: Annotated[
        float, typer.Option("--plan-hours", min=0.1, help="Plan from this many first hours; replay the rest.")
    ] = 12.0,
    gpu_model: ModelOpt = "",
    gpu_memory_gib: MemOpt = 80.0,
    memory_margin: MarginOpt = 0.10,
    contention_share_max: ContentionOpt = 0.005,
    mix_team: MixOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Proof on history: plan from the first part of the trace, replay the rest co-located, and
    report GPUs saved, contended minutes and minutes memory would not have fit (must be 0),
    against the naive first-fit (peak memory, p95 utilisation) on the same data. Exit 1 when
    memory would not have fit."""
    with exit_on_errors():
        usage, items = usage_of(read_trace(trace, gpu_model=gpu_model))
        span_h = usage.bins * usage.step_s / 3600.0
        if plan_hours >= span_h:
            fail(f"--plan-hours {plan_hours:g} leaves nothing to replay: the trace spans {span_h:.1f} h", 2)
        cfg = _cfg(gpu_memory_gib, memory_margin, contention_share_max, mix_team)
        summary = backtest_summary(backtest(usage, items, cfg, plan_hours=plan_hours))
    if json_out:
        print(json.dumps(summary))
    else:
        table = Table(title=f"consolidation backtest of {trace.name}: plan {plan_hours:g} h, replay the rest")
        for col in ("", "GPUs after", "saved", "contended minutes", "memory violations"):
            table.add_column(col, justify="right")
        for name, pre in (("time-aware", ""), ("naive first-fit", "naive_")):
            table.add_row(
                name,
                f"{summary[pre + 'gpus_after']} of {summary['gpus_before']}",
                f"{100 * summary[pre + 'saved_share']:.1f} %",
                f"{100 * summary[pre + 'contention_minutes_share']:.3f} %",
                f"{summary[pre + 'memory_violations']:g} min",
            )
        out.print(table)
    if summary["memory_violations"] > 0:
        raise typer.Exit(1)
