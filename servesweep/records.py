"""The records that cross stages, as named types (docs/records.md is their prose).

Writers build these dicts; readers must tolerate missing optional fields and ignore fields
they do not know. `tests/test_house.py` checks that every field named here is documented
in docs/records.md and the other way round.

The hunt's results/hunt/hunt.json has its own types: `servesweep.hunt.record`.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping
from typing import Any, Generic, NotRequired, Self, TypedDict, TypeVar, cast, overload


class GpuSlotRecord(TypedDict):
    """The cell record's `gpu_slots` (servesweep.server.gpu_slots)."""

    needed: int
    held: list[str]
    cuda_visible_devices: str | None
    pool: list[str]
    source: str
    lock_dir: str | None
    waited_s: float


class CapacityRecord(TypedDict):
    """The cell record's `capacity` (benchmark.search only; servesweep.capacity.search)."""

    value: float | int | str | None  # levels in their JSON form ("inf")
    low: float | int | str | None
    high: float | int | str | None
    probes: list[float | int | str]
    attainment: float
    client_bound_levels: list[float | int | str]


class SetupFailure(TypedDict):
    """Why a stack or model could not be set up (servesweep.resources.setup)."""

    stage: str  # stack | model
    cause: str  # one of servesweep.resources.setup.SETUP_CAUSES
    message: str
    log_tail: list[str]  # the setup job's log, last 50 lines


class StackColumns(TypedDict, total=False):
    """The stack-manifest fields every row of results/summary.csv has a column for
    (`stack_<field>`), in the table's order; servesweep.results.collect.cells takes them from
    here, and the report's stack table too."""

    stack: str
    kind: str
    python: str
    python_version: str
    torch: str | None
    torch_cuda: str | None
    transformers: str | None
    sglang: str | None
    vllm: str | None
    flashinfer: str | None
    nccl: str | None
    cpu_model: str | None
    gpus: list[dict] | None
    driver: str | None
    nvcc: str | None
    topology: str | None
    freeze_sha256: str
    freeze_count: int
    installer: str | None
    built_at: str
    build_s: float


class ResourceIdentity(TypedDict):
    """What a stack or model is (servesweep.resources.identity): 12-hex hashes."""

    spec: str  # the sweep file's entry, with its spec file's content
    content: str | None  # what the build gave; None for a failed setup


class StackManifest(StackColumns, total=False):
    """resources/stacks/{stack}/manifest.json (servesweep.resources.stacks, probed from inside):
    the columns above, then these (summary.csv appends the ones a manifest has after them).
    A stack that could not be built has only stack, kind, status, failure, attempt,
    built_at and build_s."""

    status: str  # ok | failed
    failure: SetupFailure  # status failed only
    attempt: int  # counts setups after a failed one (each invocation retries it)
    gpu_links: dict[str, str] | None  # {"0-1": "NV18", …} from the topology matrix
    nvlink: dict[str, dict] | None  # per GPU {links, active, total_gb_s}
    comm_env: dict[str, str]  # NCCL_*, NVSHMEM_*, TORCH_SYMM*, … in the stack's environment
    sgl_kernel: str | None
    triton: str | None
    driver_cuda: str | None
    torch_cuda_available: bool | None
    torch_device_count: int | None
    torch_import_error: str | None
    spec_file: str
    spec_sha256: str
    container_runtime: str
    container_image: str
    container_image_id: str | None
    python_inside: str | None
    identity: ResourceIdentity


class ModelFile(TypedDict):
    path: str
    size: int
    sha256: str


class ModelManifest(TypedDict, total=False):
    """resources/models/{model}/manifest.json (servesweep.resources.models). A model that
    could not be had has only model, source, status, failure, attempt, built_at and
    built_s."""

    model: str
    source: dict
    status: str  # ok | failed
    failure: SetupFailure  # status failed only
    attempt: int  # counts setups after a failed one
    built_at: str  # failed manifests only: when the setup gave up
    path: str
    synthetic: bool
    files: list[ModelFile]
    total_bytes: int
    built_s: float
    synthetic_params: dict
    tokenizer_corpus: dict
    identity: ResourceIdentity


class Failure(TypedDict):
    stage: str  # launch | boot | level | teardown; stack | model (its setup failed)
    cause: str  # servesweep.server.failures.CAUSES; a setup's: resources.setup.SETUP_CAUSES
    level: int | float | str | None  # the level's JSON form, as a level summary's
    repeat: int | None
    message: str
    log_tail: list[str]


class BootAttempt(TypedDict):
    cause: str
    message: str


class TeardownRecord(TypedDict):
    clean: bool
    seconds: float
    escalated: bool
    leftover_pids: list[int]
    port_free: bool
    gpus_released: bool | None


class LevelColumns(TypedDict, total=False):
    """The level-summary fields every row of results/summary.csv has a column for, in the
    table's order (servesweep.results.collect.cells takes them from here; the judgement's
    `valid` and `invalid_reasons` follow `cause`)."""

    level: int | float | str  # a concurrency, or a rate in requests/s ("inf": all at once)
    in_boot: int  # which measurement of the level within the boot
    status: str  # ok | failed | not_run
    cause: str | None
    metrics_version: str  # servesweep.METRICS_VERSION it was computed under
    recomputed_from: str  # set by collect when it recomputed an older definition's summary
    num_prompts: int
    warmup: int
    completed: int
    failed: int
    errors: dict[str, int]
    duration_s: float | None
    steady_window_s: float | None
    total_input_tokens: int
    total_output_tokens: int
    output_throughput: float | None
    total_token_throughput: float | None
    request_throughput: float | None
    steady_output_throughput: float | None
    steady_total_token_throughput: float | None
    peak_output_throughput: float | None
    achieved_concurrency: float | None
    concurrency: float | None
    client_bound: bool
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    std_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    std_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    std_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    std_e2el_ms: float | None
    p90_e2el_ms: float | None
    p99_e2el_ms: float | None
    mean_chunk_gap_ms: float | None
    median_chunk_gap_ms: float | None
    std_chunk_gap_ms: float | None
    p90_chunk_gap_ms: float | None
    p99_chunk_gap_ms: float | None
    usage_mismatch: int
    client_cpu_s: float | None
    client_cpu_share: float | None
    client_workers: int
    client_max_loop_lag_ms: float | None
    energy_j: float | None  # added by servesweep.run.cell (NVML)
    joules_per_output_token: float | None  # likewise
    started_at: str | None


class LevelSummary(LevelColumns, total=False):
    """results/cells/.../r{repeat}/levels/L{level}_i{in_boot}.json (bench.metrics): the columns
    above, then these where a level has them (summary.csv appends them as it finds them)."""

    repeat: int  # the boot (summary.csv has the cell's)
    probe: bool  # a capacity-search probe (servesweep.capacity.search), not a configured level
    clock_origin_ns: int | None
    # num_prompts: auto only (servesweep.sizing): why the level stopped sending
    stop_reason: str | None  # precision | cost_optimal | cap | max_requests
    stop_rse: float | None  # the throughput's relative standard error reached (a fraction)
    stop_batches: int  # batches counted by the stop rule (the first, discarded, not counted)
    stop_target_rse: float | None  # precision.boot_cv_pct only: the cost-optimal RSE at the stop
    boot_share_s: float | None  # likewise: the boot's start-up seconds a measured level
    # Rate levels only (servesweep.bench.arrivals.rate_figures):
    load: str  # "rate"
    max_concurrency: int | None
    target_rate: float | None
    scheduled_rate: float | None
    achieved_rate: float | None
    achieved_ratio: float | None
    send_lag_p50_ms: float | None
    send_lag_p99_ms: float | None
    send_lag_max_ms: float | None
    late_requests: int
    held_requests: int
    rate_short: bool
    # Added by servesweep.run.cell around the client's summary:
    server_before: dict  # the engine's snapshot before the level
    server_after: dict  # ...and after it
    server_counters: dict[str, float]  # counters' increase over the level
    server_peaks: dict  # the engine's gauges at their largest while it ran
    gpu: dict  # NVML telemetry over the level (servesweep.server.telemetry)


class SummaryCell(TypedDict):
    """The cell's columns, first in every row of results/summary.csv (from its CellRecord)."""

    stack: str
    model: str
    variant: str
    repeat: int
    engine: str | None
    spec_hash: str | None
    client_version: str | None
    attempt: int
    cell_status: str  # the CellRecord's status
    failure_stage: str | None
    failure_cause: str | None
    boot_s: float | None
    machine: str | None  # MachineFacts' key: which hardware measured the boot


class LevelGates(TypedDict):
    """Collect's judgement of a level, columns of every row of results/summary.csv (after
    the level's `cause`): whether it may enter a verdict, and why not
    (servesweep.results.collect.validity)."""

    valid: bool
    invalid_reasons: str | None  # "gate: detail; …", None when valid


class LevelJudgement(LevelGates, total=False):
    """All that collect adds to a level summary in results/summary.csv: its gates, the
    prefix-cache hit rate of an ok level, and goodput with `slo:`
    (servesweep.capacity.goodput.Goodput); summary.csv appends these as it finds them."""

    prefix_cache_hit_rate: float | None
    slo_met: int
    slo_met_share: float | None
    goodput_request_rate: float | None
    goodput_output_throughput: float | None


class RequestRecord(TypedDict):
    """One line of results/cells/.../r{repeat}/levels/L{level}_i{in_boot}.requests.jsonl."""

    index: int
    warmup: bool
    ok: bool
    error: str | None
    error_detail: str | None
    status_code: int | None
    prompt_tokens: int
    output_tokens: int | None
    usage_reported: bool
    retokenized_tokens: int | None
    retokenized_whole_tokens: int | None
    worker: int
    sent_s: float
    end_s: float
    ttft_ms: float | None
    e2el_ms: float | None
    tpot_ms: float | None
    chunk_times_ms: list[float]
    chunk_tokens: list[int]
    scheduled_s: NotRequired[float]  # rate levels: when it was due, on the sent_s clock
    held: NotRequired[bool]  # rate levels: due while the concurrency cap was full


class SpecModel(TypedDict):
    """A cell spec's `model`: its name and its source as the config gives it."""

    name: str
    source: dict[str, Any]  # {synthetic | hf | path: …}


class CellSpec(TypedDict):
    """Everything one cell's measurement depends on: the contract from the sweep to a boot
    (built once, by servesweep.sweep.config.Sweep.spec; its canonical JSON is a param of
    run_cell and its hash the cell's `spec_hash`). The cell record's `spec`. A plain dict at
    run time, so its JSON and hash are what they were before it had a type."""

    stack: dict[str, Any]  # {"name": the stack, **its config}
    model: SpecModel
    variant: str
    extends_chain: list[str]
    engine: str
    engine_options: dict[str, Any]
    flags: list[list]  # [name, value] pairs, in the order the server gets them
    command: list[str]  # with <stack>, <model>, <port> placeholders
    env: dict[str, str]
    gpus: int
    server: dict[str, Any]  # the config's `server:`, defaults filled
    correctness: dict[str, Any] | bool  # the pass's settings; False: off
    benchmark: dict[str, Any]  # `benchmark:` less `repeats`, with num_prompts_per_level
    client_version: str
    slo: NotRequired[dict[str, Any]]  # benchmark.search only: the SLO it searches under


class MachineGpu(TypedDict):
    """One GPU of the host a boot ran on (servesweep.server.machine)."""

    index: int
    name: str | None
    uuid: str | None


class MachineFacts(TypedDict):
    """The machine a boot ran on: cell.json `machine` (servesweep.server.machine)."""

    key: str  # 12 hex: the GPUs' UUIDs, or the host name and CPU model without GPUs
    hostname: str
    cpu_model: str | None
    cpus: int | None
    gpus: list[MachineGpu]  # every GPU NVML sees on the host, by physical index
    driver: str | None


class CellRecord(TypedDict):
    """results/cells/{stack}/{model}/{variant}/r{repeat}/cell.json (servesweep.run.cell)."""

    stack: str
    model: str
    variant: str
    repeat: int  # which boot of the cell
    engine: str
    spec_hash: str
    spec: CellSpec
    client_version: str
    attempt: int
    status: str  # ok | failed
    failure: Failure | None
    command: list[str]
    command_str: str
    env: dict[str, str]
    host: str
    port: int
    server_pid: int | None
    boot_s: float | None
    boot_facts: dict  # graph_capture_s, kv_cache_tokens, ... where the engine's log says them
    boot_attempts: list[BootAttempt]
    teardown: TeardownRecord | None
    scheduler: dict | None  # the SLURM job that measured it (servesweep.run.scheduler)
    machine: NotRequired[MachineFacts]  # its host, CPU and GPUs (older records lack it)
    correctness: dict | None  # the pass's summary, or {status: skipped, why}
    deadline: float | None  # when that job was to be killed (epoch s); None: no limit
    gpu_slots: GpuSlotRecord | None  # the GPUs it held (servesweep.server.gpu_slots)
    workflow_env: dict[str, str]  # set for the server outside the spec (servesweep.server.env)
    comm_env: dict[str, str]  # NCCL_*, NVSHMEM_*, TORCH_SYMM*, … the server got
    started_at: str
    finished_at: str | None
    stack_manifest: StackManifest
    model_manifest: ModelManifest
    levels: list[LevelSummary]
    capacity: NotRequired[CapacityRecord]  # benchmark.search only


# Read-back: a record as its readers see it. Each reader is a NamedTuple over a record type's
# fields (declared once, above); `of` takes a record as written, any version, and gives every
# field it lacks its default (None unless named), so readers use attributes, never .get. The
# record itself is not changed: what is written back or tabled is the record as read.


R = TypeVar("R")  # the record type a reader reads


class Read(tuple[Any, ...], Generic[R]):
    """A reader as the type checker sees it: `reader(name, R)` gives a `type[Read[R]]`, and
    `Read[CellRecord]` annotates a read-back cell. Never instantiated: the readers are the
    namedtuple classes `reader` builds. Their fields are the records' (for the checker, Any:
    a namedtuple's fields cannot be derived from a TypedDict's)."""

    __slots__ = ()
    _fields: tuple[str, ...]

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None, **given: Any) -> Self:
        raise NotImplementedError  # the reader's own `of`

    def _asdict(self) -> dict[str, Any]:
        raise NotImplementedError

    def _replace(self, **changes: Any) -> Self:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


@overload
def reader(name: str, record: type[R], /, **defaults: Any) -> type[Read[R]]: ...
@overload
def reader(name: str, /, *records: type | list[str], **defaults: Any) -> type[Read[Any]]: ...
def reader(name: str, /, *records: Any, **defaults: Any) -> type[Read[Any]]:
    """A reader over the record types' fields (or a table's column names), in their order."""
    names = (r.__annotations__ if isinstance(r, type) else r for r in records)
    fields = list(dict.fromkeys(f for r in names for f in r))
    # Fields known only at run time: mypy wants namedtuple's literal.
    base = namedtuple(name, fields, defaults=[defaults.get(f) for f in fields])  # type: ignore[misc]

    def of(cls: Any, raw: Mapping[str, Any] | None, **given: Any) -> Any:
        """`raw`'s fields (any mapping: a record, a summary.csv row); those it lacks from
        `given`, then the reader's defaults."""
        raw = {} if raw is None else raw
        return cls(**{**given, **{f: raw[f] for f in cls._fields if f in raw}})

    return cast("type[Read[Any]]", type(name, (base,), {"__slots__": (), "of": classmethod(of)}))


CellRead = reader("CellRead", CellRecord, repeat=0, attempt=0)
FailureRead = reader("FailureRead", Failure)  # a cell's or a manifest's (SetupFailure)
StackRead = reader("StackRead", StackManifest, attempt=0)
ModelRead = reader("ModelRead", ModelManifest, attempt=0)
FileRead = reader("FileRead", ModelFile)
SpecRead = reader("SpecRead", CellSpec)
TeardownRead = reader("TeardownRead", TeardownRecord)
LevelRead = reader(
    "LevelRead", LevelSummary, LevelJudgement, in_boot=0, repeat=0, metrics_version="0"
)  # a level without metrics_version is of the first definition
# A row of results/summary.csv: the cell's columns, the level's and collect's.
SummaryRow = reader("SummaryRow", SummaryCell, LevelSummary, LevelJudgement)
