"""`python -m sglang.launch_server` as the tests need it: this process is the tokenizer manager,
the scheduler runs in a spawned child process.  Usage: serve_sglang.py."""
import asyncio
import inspect
import multiprocessing as mp
import sys

from sglang.srt.managers.detokenizer_manager import DetokenizerManager
from sglang.srt.managers.tokenizer_manager import TokenizerManager

if __name__ == "__main__":
    from sglang.srt.managers.scheduler import run_scheduler_process

    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=run_scheduler_process, args=(None, None, 0, 0, 0, 0, None, writer))
    proc.start()
    tm, dm = TokenizerManager(), DetokenizerManager()
    handle = getattr(tm, "_handle_batch_output", None) or tm.handle_loop_once
    detok = getattr(dm, "handle_batch_token_id_out", None) or dm.event_loop_once
    while True:
        while not reader.poll(0.2):
            if not proc.is_alive() and not reader.poll(0):
                sys.exit(f"engine process died ({proc.exitcode})")
        out = reader.recv()
        if out == "done":
            break
        done = handle(detok(out))
        if inspect.iscoroutine(done):
            asyncio.run(done)
    proc.join()
    sys.exit(proc.exitcode)
