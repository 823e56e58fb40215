// codeexec session driver for javascript: one live Node.js whose global
// scope persists between calls, as in a notebook. See sandbox/sessions
// (protocol.go) for the protocol; argv: the control input and output, each a
// path (a FIFO, unlinked once open) or fd:N.
(function () {
  'use strict';
  const fs = require('fs');
  const vm = require('vm');
  const path = require('path');
  const { Readable } = require('stream');
  const Module = require('module');
  const args = process.argv.slice(-2);
  const open = (spec, flags) => {
    if (spec.startsWith('fd:')) return Number(spec.slice(3));
    const fd = fs.openSync(spec, flags);
    try { fs.unlinkSync(spec); } catch (e) { /* already gone */ }
    return fd;
  };
  const cin = open(args[0], 'r');
  const cout = open(args[1], 'w');
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
    if (e instanceof Exit) return;
    frame('E', 'Unhandled rejection: ' + (e && e.stack ? e.stack : String(e)) + '\n');
  });

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

  let buf = Buffer.alloc(0);
  let busy = false;
  const step = async () => {
    if (busy) return;
    busy = true;
    try {
      for (;;) {
        const nl = buf.indexOf(10);
        if (nl < 0) return;
        const m = /^(\d+) (\d+)$/.exec(buf.subarray(0, nl).toString('latin1'));
        if (!m) { frame('F', 'bad call header'); process.reallyExit(125); }
        const clen = Number(m[1]), slen = Number(m[2]);
        if (buf.length < nl + 1 + clen + slen) return;
        const code = buf.subarray(nl + 1, nl + 1 + clen).toString('utf8');
        stdinBuf = Buffer.from(buf.subarray(nl + 1 + clen, nl + 1 + clen + slen));
        buf = buf.subarray(nl + 1 + clen + slen);
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
        frame('X', String(rc & 0xff));
      }
    } finally {
      busy = false;
    }
  };
  const input = fs.createReadStream(null, { fd: cin, highWaterMark: 1 << 16 });
  input.on('data', (d) => { buf = Buffer.concat([buf, d]); step(); });
  input.on('end', () => process.reallyExit(0));
  input.on('error', () => process.reallyExit(0));
  frame('R', 'javascript ' + process.versions.node);
})();
