"""Random Kineto (Chrome trace) documents, written by hand so that every JSON form appears:
integer, decimal and exponent numbers, escapes and non-ASCII in names (lone surrogates,
control characters and noncharacters among them), any whitespace, any
key order, missing and extra fields, duplicated keys, the 2021 / 2022 / 2025 schemas."""
from __future__ import annotations

import gzip
import json
import random

# (GPU categories, runtime categories, CPU categories, other categories: skipped, or for
# gpu_user_annotation read as GPU-side ranges) per schema.
SCHEMAS = {
    "2021": (["Kernel", "Memcpy", "Memset"], ["Runtime"], ["Operator"], ["async", "Trace"]),
    "2022": (["kernel", "gpu_memcpy", "gpu_memset"], ["cuda_runtime"], ["cpu_op", "user_annotation"],
             ["async_cpu_to_gpu", "Trace"]),
    "2025": (["kernel", "gpu_memcpy", "gpu_memset"], ["cuda_runtime", "cuda_driver"],
             ["cpu_op", "user_annotation"], ["python_function", "ac2g", "cpu_instant_event", "gpu_user_annotation"]),
}
_NAME_PARTS = ["void gemm<float, 128>(float*, int)", "aten::add", "cudaLaunchKernel", "Memcpy HtoD",
               "ProfilerStep#3", "ProfilerStep#4", "naïve kernel", "核函数", "emoji 🚀", 'quote " inside',
               "back\\slash", "tab\tand\nnewline", "ctrl \x01", "a" * 30, "", "stream 7", "x:y", "{ph}",
               "\u2028line sep", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
               "void ncclKernel_Broadcast_RING_LL(ncclWorkElem)",
               # text a report cannot hold: lone surrogates (high, low, a pair reversed), control
               # characters, noncharacters; made valid text (U+FFFD) by every reader
               "lone \ud800 high", "lone \udc00 low", "reversed \udc00\ud800", "esc \x1b[31m red \x7f",
               "nonchar \ufffe \ufdd0 \U0010ffff"]
# Process-group args as PyTorch profilers write them into NCCL kernels, and malformed ones.
_GROUP_NAMES = ["0", "tp", 3, None, "é", True]
_GROUP_RANKS = ["[0, 1]", [3, 1], "[2, 0]", "x", [], [1.5], "[0, \"a\"]"]


def _number(r: random.Random, us: float, allow_exponent: bool = True) -> str:
    """`us` written in one of JSON's number forms (int, decimals, exponent)."""
    form = r.random()
    if form < 0.4:
        return str(int(us))
    if form < 0.8 or not allow_exponent:
        digits = r.choice([1, 3, 6, 9])
        return f"{us:.{digits}f}"
    mantissa = f"{us:.6e}"
    return r.choice([mantissa, mantissa.upper(), mantissa.replace("e+", "e"), f"{int(us)}E0"])


def _string(r: random.Random, text: str) -> str:
    # A lone surrogate is written as its escape, mostly: written raw, the file is not UTF-8.
    surrogate = any("\ud800" <= c <= "\udfff" for c in text)
    return json.dumps(text, ensure_ascii=r.random() < (0.9 if surrogate else 0.3))


def _event(r: random.Random, schema: str, t_us: float, corr: int, rel: bool) -> list[tuple[str, str]]:
    gpu, api, cpu, skipped = SCHEMAS[schema]
    role = r.choice(["gpu", "gpu", "api", "cpu", "cpu", "skipped", "other"])
    cat = {"gpu": lambda: r.choice(gpu), "api": lambda: r.choice(api), "cpu": lambda: r.choice(cpu),
           "skipped": lambda: r.choice(skipped), "other": lambda: r.choice(["fwdbwd", "weird", "Kernel2"])}[role]()
    name = r.choice(_NAME_PARTS) if r.random() < 0.8 else "".join(r.choice(_NAME_PARTS) for _ in range(3))
    dur = r.choice([0.0, 1.0, 2.5, 17.125, 100.0, 1234.5678])
    if r.random() < 0.03:
        dur = -dur - 1
    pid: object = r.choice([0, 1, 7, 12345]) if role != "gpu" or r.random() < 0.8 else "stream 7"
    tid: object = r.choice([7, 13, 99, 140001]) if r.random() < 0.85 else r.choice(["stream 7", "thread 3", "t"])
    args: dict[str, object] = {}
    if role in ("gpu", "api") and r.random() < 0.9:
        args["correlation"] = corr
    if role == "gpu":
        if r.random() < 0.5:
            args["device"] = r.choice([0, 1])
        if r.random() < 0.5:
            args["stream"] = r.choice([7, 13])
        if cat != gpu[0] and r.random() < 0.7:
            args["bytes"] = r.choice([0, 64, 4096, 1 << 33])
    if role == "gpu" and r.random() < 0.3:
        if r.random() < 0.8:
            name = r.choice(_NAME_PARTS[-2:])
        args[r.choice(["Process Group Name", "Process Group Name", "pg_name"])] = r.choice(_GROUP_NAMES)
        if r.random() < 0.8:
            args["Process Group Ranks"] = r.choice(_GROUP_RANKS)
    if r.random() < 0.3:
        args[r.choice(["External id", "Sequence number", "grid", "kind", "Concrete Inputs"])] = r.choice(
            [1, "x", [1, 2, [3]], {"a": None}, 2.5, True])
    ph = "X" if r.random() < 0.92 else r.choice(["i", "M", "s", "f", "B", "E", "C"])
    fields: list[tuple[str, str]] = [("ph", _string(r, ph)), ("cat", _string(r, cat)), ("name", _string(r, name)),
                                     ("pid", json.dumps(pid)), ("tid", json.dumps(tid)),
                                     ("ts", _number(r, t_us)), ("dur", _number(r, dur))]
    if args or r.random() < 0.5:
        fields.append(("args", json.dumps(args, ensure_ascii=r.random() < 0.5)))
    if r.random() < 0.1:
        fields.append((r.choice(["id", "bp", "s", "flow_out"]), json.dumps(r.choice([1, "e", None]))))
    if r.random() < 0.04:  # a field missing (ts or dur: the file is refused)
        del fields[r.randrange(1, len(fields))]
    if r.random() < 0.04:  # a key twice: the JSON reader keeps the last
        k, _ = r.choice(fields[1:])
        fields.append((k, _number(r, t_us + 1) if k in ("ts", "dur") else _string(r, "dup")))
    if r.random() < 0.06:  # key order: "ph" need not come first
        r.shuffle(fields)
    return fields


def _write(r: random.Random, fields: list[tuple[str, str]]) -> str:
    colon = r.choice([":", ":", ": ", " : " if r.random() < 0.1 else ":"])
    comma = r.choice([",", ", ", ",\n    "])
    return "{" + comma.join(f'"{k}"{colon}{v}' for k, v in fields) + "}"


def kineto_trace(r: random.Random) -> tuple[bytes, str]:
    """(bytes, suffix) of a random Kineto trace: ``.json`` or ``.json.gz``."""
    schema = r.choice(list(SCHEMAS))
    rel = r.random() < 0.3
    t = r.uniform(0, 5e6) if rel else 1.6e15 + r.uniform(0, 1e9)
    events = []
    for i in range(r.randint(0, 40)):
        t += r.choice([0.0, 0.5, 3.0, 10.25, 100.0])
        events.append(_write(r, _event(r, schema, t, 100 + r.randrange(max(i, 1)), rel)))
    sep = r.choice([",", ", ", ",\n", ",\n  \t"])
    body = "[" + r.choice(["", "\n", " "]) + sep.join(events) + r.choice(["", "\n", " "]) + "]"
    header: list[tuple[str, str]] = []
    if schema != "2021":
        header.append(("schemaVersion", "1"))
        header.append(("deviceProperties", json.dumps([{"id": 0, "name": "NVIDIA Fake GPU", "totalGlobalMem": 1 << 34}])))
    if schema == "2025" and not rel and r.random() < 0.7:
        header.append(("baseTimeNanoseconds", str(r.choice([0, 1_700_000_000_000_000_000]))))
    trailer = [("traceName", _string(r, "trace ü")), ("displayTimeUnit", '"ms"')] if r.random() < 0.5 else []
    if r.random() < 0.05:
        text = body  # a bare event list, as Chrome allows
    else:
        parts = header + [("traceEvents", body)] + trailer
        nl = r.choice(["", "\n", "\n  "])
        text = "{" + nl + ("," + nl).join(f'"{k}": {v}' for k, v in parts) + nl + "}"
    data = text.encode("utf-8", "surrogatepass")
    if r.random() < 0.25:
        return gzip.compress(data, compresslevel=1), ".json.gz"
    return data, ".json"
