"""`vllm serve` as the tests need it: this process is the API server (output processing), the
engine core runs in a spawned child process.  Usage: serve_vllm.py REQUESTS."""
import multiprocessing as mp
import sys

from vllm import VERSION

if VERSION >= (0, 7, 0):
    from vllm.v1.engine.output_processor import OutputProcessor
else:
    from vllm.v1.engine.detokenizer import Detokenizer

if __name__ == "__main__":
    from vllm.v1.engine.core import EngineCoreProc

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=EngineCoreProc.run_engine_core, args=(child, int(sys.argv[1])))
    proc.start()
    process = OutputProcessor().process_outputs if VERSION >= (0, 7, 0) else Detokenizer().step
    steps = 0
    while True:
        while not parent.poll(0.2):
            if not proc.is_alive() and not parent.poll(0):
                sys.exit(f"engine process died ({proc.exitcode})")
        out = parent.recv()
        if out == "done":
            break
        steps += 1
        process(out)
    proc.join()
    print(f"engine steps {steps}", file=sys.stderr)
    sys.exit(proc.exitcode)
