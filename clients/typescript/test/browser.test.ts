// The generated TypeScript client in a real headless Chromium (Debian's package), against
// a running stack through the gateway's Connect face, with CORS allowing the page.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { build } from "esbuild";

import { freePort, REPO, startStack, type Stack } from "./stack.js";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
let reported: (value: string) => void = () => undefined;
const result = new Promise<string>((ok) => {
  reported = ok;
});

let stack: Stack | undefined;
let page: Server | undefined;
let pageUrl = "";

before(async () => {
  if (CHROMIUM === undefined) {
    return;
  }
  const pagePort = await freePort();
  const origin = `http://127.0.0.1:${pagePort}`;
  stack = await startStack({ TESTAMENT_CORS_ORIGINS: origin });
  const uploaded = await fetch(`${stack.gatewayUrl}/ingest?filename=browser.md&mime=text/markdown`, {
    method: "POST",
    headers: { "content-type": "application/octet-stream" },
    body: "# From a browser test\n\nRavi owns the exporter.\n",
  });
  assert.equal(uploaded.status, 200);
  const bundle = await build({
    entryPoints: [join(REPO, "clients/typescript/test/browser/page.ts")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    write: false,
  });
  const script = bundle.outputFiles[0]?.text ?? "";
  const html = `<!doctype html><html><head><meta charset="utf-8"><title>testament</title></head>` +
    `<body><script type="module">${script.replaceAll("</script", "<\\/script")}</script></body></html>`;
  page = createServer((req, res) => {
    if (req.method === "POST" && req.url === "/result") {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (part: string) => (body += part));
      req.on("end", () => {
        reported(body);
        res.writeHead(204);
        res.end();
      });
      return;
    }
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(html);
  });
  await new Promise<void>((ok) => page!.listen(pagePort, "127.0.0.1", ok));
  pageUrl = `${origin}/?gateway=${encodeURIComponent(stack.gatewayUrl)}`;
});

after(async () => {
  page?.close();
  await stack?.stop();
});

test("the web SDK works in headless Chromium: unary JSON and binary, a server stream, typed errors", {
  skip: CHROMIUM === undefined ? "no Chromium here (make install puts Debian's chromium package in place)" : false,
}, async () => {
  const profile = await mkdtemp(join(tmpdir(), "testament-chromium-"));
  const browser = spawn(CHROMIUM!, [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    `--user-data-dir=${profile}`, pageUrl,
  ], { stdio: "ignore", detached: true }); // its own process group: the renderers die with it
  const exited = new Promise((done) => browser.once("exit", done));
  let timer: NodeJS.Timeout | undefined;
  try {
    const raw = await Promise.race([
      result,
      new Promise<string>((_ok, fail) => {
        timer = setTimeout(() => fail(new Error("the page reported nothing within 60 s")), 60_000);
      }),
    ]);
    assert.deepEqual(JSON.parse(raw), {
      operations: 4,
      health: "ok",
      documents: 1,
      streamed: true,
      error: { code: 3, domain: "testament" }, // InvalidArgument, with the ErrorInfo domain
    });
  } finally {
    clearTimeout(timer);
    // Kill the whole group and wait: a renderer still writing its profile makes rm fail
    // with ENOTEMPTY (seen in a fresh clone's make test); rm retries what is left.
    try {
      process.kill(-browser.pid!, "SIGKILL");
    } catch {
      browser.kill("SIGKILL");
    }
    await exited;
    await rm(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
});
