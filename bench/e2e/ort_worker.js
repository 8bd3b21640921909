// onnxruntime-node worker for bench.py: same line protocol as the Python worker.
// argv: model.onnx kind batch threads warmup spin (spin: 1 lets the intra-op pool spin, 0 not)
'use strict';
const ort = require('onnxruntime-node');
const readline = require('readline');

async function main() {
  const [path, kind, batchText, threadsText, warmupText, spinText] = process.argv.slice(2);
  const batch = Number(batchText);
  const session = await ort.InferenceSession.create(path, {
    intraOpNumThreads: Number(threadsText),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    // Follows bench.py's OMP_WAIT_POLICY for PyTorch: no spinning when PASSIVE.
    extra: {session: {intra_op: {allow_spinning: spinText === '0' ? '0' : '1'}}},
  });
  let feeds;
  if (kind === 'resnet50') {
    const data = new Float32Array(batch * 3 * 224 * 224);
    for (let i = 0; i < data.length; i++) data[i] = Math.sin(i) * 0.5;
    feeds = {input: new ort.Tensor('float32', data, [batch, 3, 224, 224])};
  } else {
    const data = new BigInt64Array(batch * 128);
    for (let i = 0; i < data.length; i++) data[i] = BigInt((i * 7919) % 30522);
    feeds = {input: new ort.Tensor('int64', data, [batch, 128])};
  }
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < Number(warmupText); i++) await session.run(feeds);
  const warm = Number(process.hrtime.bigint() - t0) / 1e9;
  process.stdout.write(JSON.stringify({ready: true, warmup_s: warm}) + '\n');
  const rl = readline.createInterface({input: process.stdin});
  for await (const line of rl) {
    const cmd = line.trim().split(/\s+/);
    if (cmd[0] === 'run') {
      const k = Number(cmd[1]);
      const leadIn = Number(cmd[2] || 0);  // untimed runs first
      for (let i = 0; i < leadIn; i++) await session.run(feeds);
      const lat = [];
      const f0 = process.resourceUsage().minorPageFault;
      for (let i = 0; i < k; i++) {
        const t = process.hrtime.bigint();
        await session.run(feeds);
        lat.push(Number(process.hrtime.bigint() - t));
      }
      const f1 = process.resourceUsage().minorPageFault;
      process.stdout.write(JSON.stringify({lat_ns: lat, minflt: f1 - f0}) + '\n');
    } else if (cmd[0] === 'quit') {
      // VmHWM: the peak of this process image (maxRSS would include the parent's at fork).
      const m = /VmHWM:\s+(\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'));
      const kb = m ? Number(m[1]) : process.resourceUsage().maxRSS;
      process.stdout.write(JSON.stringify({maxrss_kb: kb}) + '\n');
      process.exit(0);
    }
  }
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
