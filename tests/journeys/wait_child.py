# Holds an 8 MiB block (one malloc, served by modelmem under the preload), says "ready", and
# waits for a line on stdin before it exits.
import sys

block = bytearray(8 << 20)
print("ready", flush=True)
sys.stdin.readline()
print(len(block))
