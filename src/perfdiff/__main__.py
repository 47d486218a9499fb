from perfdiff.cli import run

run()
