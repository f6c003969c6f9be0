# Type stubs of the extension module (crates/coflow-py).
from typing import Any, Callable, Dict, List, Optional, Tuple

POLICIES: List[str]
WIDE_AREA_POLICIES: List[str]
JOB_POLICIES: List[str]
ERROR_KINDS: List[str]
LEASE_S: Tuple[float, float]
MAX_TIMEOUT_S: float
MAX_NUM_FLOWS: int
MAX_NAME_BYTES: int
MAX_KIND_BYTES: int
MAX_PARENTS: int
MAX_DEADLINE_S: float
MAX_ALL_GETS_TIMEOUT_S: float
MAX_PIECE_BYTES: int
MAX_MACHINES: int
__version__: str

class ServiceError(Exception): ...

class Workload:
    machines: int
    coflows: int
    flows: int
    bytes: int
    source: str
    def to_jsonl(self) -> str: ...
    def same_as(self, other: Workload) -> bool: ...

class Results:
    json: str
    csv: str
    baseline_csv: Optional[str]
    describe: str
    wall_s: List[Tuple[str, float]]
    notes: List[str]
    kind: str
    tables: str

class Chunks:
    def next(self) -> Optional[bytes]: ...
    def close(self) -> None: ...

class Client:
    def __init__(
        self,
        coordinator: str,
        agent: str,
        token: Optional[str] = None,
        tls: Optional[Tuple[str, str, str]] = None,
        timeout_s: Optional[float] = None,
    ) -> None: ...
    def register(
        self,
        num_flows: int,
        name: str = "",
        kind: str = "",
        deadline_s: Optional[float] = None,
        parents: List[int] = ...,
        weight: float = 1.0,
        all_gets_timeout_s: Optional[float] = None,
        lease_s: Optional[float] = None,
    ) -> int: ...
    def renew(self, coflows: List[int]) -> List[int]: ...
    def put(self, coflow: int, data_id: str, data: bytes) -> int: ...
    def put_file(self, coflow: int, data_id: str, path: str, offset: int, length: int) -> int: ...
    def get(self, coflow: int, data_id: str) -> bytes: ...
    def get_stream(self, coflow: int, data_id: str) -> Chunks: ...
    def seal(self, coflow: int) -> None: ...
    def unregister(self, coflow: int) -> None: ...
    def status(self) -> Dict[str, Any]: ...

def read_trace(path: str) -> Workload: ...
def synthetic(seed: int = 1, coflows: Optional[int] = None, machines: Optional[int] = None) -> Workload: ...
def parse_workload(text: str, source: str) -> Workload: ...
def simulate(
    workload: Workload,
    policies: str,
    port_rate: str,
    baseline: str,
    deadline_x: Optional[float],
    deadline_fraction: Optional[float],
    offline: bool,
    seed: int,
    threads: Optional[int],
    stages: int = 1,
    model_name: Optional[str] = None,
    coflowsim_rules: Optional[str] = None,
    wan: Optional[Dict[str, Any]] = None,
    sweep: Optional[Tuple[List[int], int]] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> Results: ...

class Cancel:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...

def _cancel_with(cancel: Optional[Cancel] = None) -> None: ...
