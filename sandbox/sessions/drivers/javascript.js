// codeexec session driver for javascript: one live Node.js whose global
// scope persists between calls, as in a notebook, started by the session's
// supervisor (supervisor.py). See sandbox/sessions (protocol.go) for the
// protocol; argv: the control input and output, fd:N each.
(function () {
  'use strict';
  const fs = require('fs');
  const vm = require('vm');
  const path = require('path');
  const { Readable } = require('stream');
  const Module = require('module');
  const [cin, cout] = process.argv.slice(-2).map((spec) => Number(spec.slice(3)));
  const MAX = 4091; // a frame is one write of at most PIPE_BUF bytes: never torn
  const wait = new Int32Array(new SharedArrayBuffer(4));
  const writeAll = (b) => {
    for (let off = 0; off < b.length;) {
      try { off += fs.writeSync(cout, b, off, b.length - off); } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
        Atomics.wait(wait, 0, 0, 1);
      }
    }
  };
  const frame = (kind, data) => {
    const buf = Buffer.isBuffer(data) ? data : Buffer.from(String(data));
    let i = 0;
    do {
      const chunk = buf.subarray(i, i + MAX);
      const b = Buffer.alloc(5 + chunk.length);
      b.write(kind, 0, 'latin1');
      b.writeUInt32BE(chunk.length, 1);
      chunk.copy(b, 5);
      writeAll(b);
      i += MAX;
    } while (i < buf.length);
  };

  // Output of the current call: console, process.stdout and process.stderr.
  const sink = (kind) => function (chunk, enc, cb) {
    if (typeof enc === 'function') { cb = enc; enc = undefined; }
    frame(kind, typeof chunk === 'string' ? Buffer.from(chunk, enc || 'utf8') : Buffer.from(chunk));
    if (typeof cb === 'function') process.nextTick(cb);
    return true;
  };
  process.stdout.write = sink('O');
  process.stderr.write = sink('E');

  // The call's stdin: process.stdin, and fs.readFileSync(0) or '/dev/stdin'.
  let stdinBuf = Buffer.alloc(0);
  Object.defineProperty(process, 'stdin', { configurable: true, get: () => stdinStream });
  let stdinStream = Readable.from([]);
  const readFileSync = fs.readFileSync;
  fs.readFileSync = function (p, opts) {
    if (p === 0 || p === '/dev/stdin') {
      const enc = typeof opts === 'string' ? opts : opts && opts.encoding;
      return enc ? stdinBuf.toString(enc) : Buffer.from(stdinBuf);
    }
    return readFileSync.apply(this, arguments);
  };

  class Exit { constructor(code) { this.code = code; } }
  process.exit = (code) => { throw new Exit(code === undefined ? (process.exitCode || 0) : code); };
  process.on('uncaughtException', (e) => {
    if (e instanceof Exit) return;
    frame('E', 'Uncaught ' + (e && e.stack ? e.stack : String(e)) + '\n');
  });
  process.on('unhandledRejection', (e) => {
    if (e instanceof Exit || (e && e.cause === callEnded)) return;
    frame('E', 'Unhandled rejection: ' + (e && e.stack ? e.stack : String(e)) + '\n');
  });

  // What a call leaves waiting to run later ends with it: its timeouts,
  // intervals and immediates are cleared, the promises of timers/promises
  // rejected, its workers terminated (and its processes are killed by the
  // supervisor). The functions that make them are wrapped here, before any
  // code of the session runs.
  const timers = require('timers');
  const timersPromises = require('timers/promises');
  const util = require('util');
  const workerThreads = require('worker_threads');
  const callEnded = new Error('the call that started this ended');
  let left = { timeouts: new Set(), immediates: new Set(), workers: new Set(), abort: new AbortController() };
  const track = (set, make) => function () {
    const t = make.apply(this, arguments);
    left[set].add(t);
    return t;
  };
  const setImmediate0 = timers.setImmediate;
  const wrapped = {
    setTimeout: track('timeouts', timers.setTimeout),
    setInterval: track('timeouts', timers.setInterval),
    setImmediate: track('immediates', timers.setImmediate),
  };
  const withSignal = (make) => function (delay, value, options) {
    const o = Object.assign({}, options);
    const mine = left.abort.signal;
    if (o.signal) {
      const both = new AbortController();
      for (const s of [o.signal, mine]) {
        if (s.aborted) both.abort(s.reason);
        else s.addEventListener('abort', () => both.abort(s.reason), { once: true });
      }
      o.signal = both.signal;
    } else {
      o.signal = mine;
    }
    return make.call(this, delay, value, o);
  };
  for (const name of ['setTimeout', 'setImmediate', 'setInterval']) {
    timersPromises[name] = withSignal(timersPromises[name]);
  }
  wrapped.setTimeout[util.promisify.custom] = timersPromises.setTimeout;
  wrapped.setImmediate[util.promisify.custom] = timersPromises.setImmediate;
  for (const [name, f] of Object.entries(wrapped)) {
    timers[name] = f;
    globalThis[name] = f;
  }
  const Worker0 = workerThreads.Worker;
  workerThreads.Worker = class Worker extends Worker0 {
    constructor(...a) {
      super(...a);
      left.workers.add(this);
    }
  };
  const endLeftovers = async () => {
    const l = left;
    left = { timeouts: new Set(), immediates: new Set(), workers: new Set(), abort: new AbortController() };
    for (const t of l.timeouts) timers.clearTimeout(t);
    for (const t of l.immediates) timers.clearImmediate(t);
    l.abort.abort(callEnded);
    await Promise.all([...l.workers].map((w) => w.terminate().catch(() => {})));
    // Rejections of what was aborted come out now, not in a later call.
    await new Promise((r) => setImmediate0(r));
  };

  const cwd = process.cwd();
  globalThis.require = Module.createRequire(path.join(cwd, '<session>'));
  globalThis.module = { exports: {} };
  globalThis.exports = globalThis.module.exports;
  globalThis.__filename = path.join(cwd, '<session>');
  globalThis.__dirname = cwd;
  process.argv.splice(1);

  // Top-level const and let become var, so that a cell can be run again.
  const reVarDecl = /^(const|let)(\s)/gm;
  // With top-level await a cell runs as an async function; its top-level
  // declarations of simple names are kept as globals.
  const hoist = (src) => src
    .replace(/^(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=/gm, '$1 =')
    .replace(/^(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)\s*\(/gm, (m, name) => name + ' = ' + m)
    .replace(/^class\s+([A-Za-z_$][\w$]*)/gm, '$1 = class $1');

  let n = 0;
  const runCell = async (code) => {
    n++;
    const filename = '<cell ' + n + '>';
    const src = code.replace(reVarDecl, 'var$2');
    let script;
    let wrapped = false;
    try {
      script = new vm.Script(src, { filename });
    } catch (e) {
      if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
      try {
        script = new vm.Script('(async () => {\n' + hoist(code) + '\n})()', { filename, lineOffset: -1 });
      } catch (e2) { throw e; }
      wrapped = true;
    }
    const v = script.runInThisContext({ displayErrors: true });
    if (wrapped) await v;
  };

  // Calls are read synchronously: between calls the event loop does not
  // turn, and this thread waits in read(2) on the control input, which is
  // what the supervisor looks for before it takes a call's end as real.
  let buf = Buffer.alloc(0);
  const chunk = Buffer.alloc(1 << 16);
  const more = () => {
    let n;
    for (;;) {
      try { n = fs.readSync(cin, chunk, 0, chunk.length, null); break; } catch (e) {
        if (e.code !== 'EAGAIN' && e.code !== 'EINTR') process.reallyExit(0);
      }
    }
    if (n === 0) process.reallyExit(0);
    buf = Buffer.concat([buf, chunk.subarray(0, n)]);
  };
  const take = (len) => {
    while (buf.length < len) more();
    const b = buf.subarray(0, len);
    buf = buf.subarray(len);
    return b;
  };
  const main = async () => {
    for (;;) {
      let nl;
      while ((nl = buf.indexOf(10)) < 0) more();
      const m = /^(\d+) (\d+) ([0-9a-f]+)$/.exec(take(nl + 1).subarray(0, nl).toString('latin1'));
      if (!m) { frame('F', 'bad call header'); process.reallyExit(125); }
      const code = take(Number(m[1])).toString('utf8');
      stdinBuf = Buffer.from(take(Number(m[2])));
      stdinStream = Readable.from(stdinBuf.length ? [stdinBuf] : []);
      let rc = 0;
      try {
        await runCell(code);
        rc = process.exitCode || 0;
      } catch (e) {
        if (e instanceof Exit) rc = Number(e.code) || 0;
        else {
          frame('E', (e && e.stack ? e.stack : 'Uncaught ' + String(e)) + '\n');
          rc = 1;
        }
      }
      process.exitCode = undefined;
      await endLeftovers();
      frame('X', String(rc & 0xff) + ' ' + m[3]);
    }
  };
  frame('R', process.pid + ' javascript ' + process.versions.node);
  main();
})();
