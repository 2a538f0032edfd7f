// A real Testament stack for the TypeScript tests: `testament up` in its own process
// group, the addresses it prints, and a clean stop (Ctrl-C, then SIGKILL if stuck).

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO = resolve(fileURLToPath(new URL(".", import.meta.url)), "../../..");
const TESTAMENT = join(REPO, ".venv/bin/testament");
const STARTUP_TIMEOUT_MS = 90_000;
const SHUTDOWN_TIMEOUT_MS = 30_000;

export interface Stack {
  gatewayUrl: string;
  /** name -> "host:port" from the `Testament is up:` line (the five services and the gateway's gRPC port). */
  addresses: Record<string, string>;
  /** Ctrl-C and wait; resolves with the launcher's exit code. */
  stop(): Promise<number | null>;
}

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? ok(port) : fail(new Error("no port"))));
    });
  });
}

function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key.startsWith("TESTAMENT_") || key === "DATABASE_URL") {
      continue;
    }
    env[key] = value;
  }
  return { ...env, ...extra };
}

export function parseUpLine(line: string): Omit<Stack, "stop"> {
  const url = /^Testament is up: (http:\/\/[^\s]+) \(([^)]*)\)/.exec(line);
  if (url === null || url[1] === undefined || url[2] === undefined) {
    throw new Error(`unexpected startup line: ${line}`);
  }
  const addresses: Record<string, string> = {};
  for (const pair of url[2].matchAll(/(\w+)=(\S+:\d+)/g)) {
    if (pair[1] !== undefined && pair[2] !== undefined) {
      addresses[pair[1]] = pair[2];
    }
  }
  return { gatewayUrl: url[1], addresses };
}

const running = new Set<ChildProcess>();

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
    try {
      process.kill(-child.pid, signal); // the launcher and the services/PostgreSQL it started
    } catch {
      // already gone
    }
  }
}

// A crashed test run must not leave a stack behind.
process.on("exit", () => {
  for (const child of running) {
    killGroup(child, "SIGKILL");
  }
});

export async function startStack(env: Record<string, string> = {}): Promise<Stack> {
  const dataDir = await mkdtemp(join(tmpdir(), "testament-ts-"));
  const gatewayPort = await freePort();
  const child = spawn(TESTAMENT, ["up", "--data-dir", dataDir, "--gateway-port", String(gatewayPort)], {
    cwd: REPO,
    env: cleanEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true, // own process group, so a stuck stack can be killed as a whole
  });
  running.add(child);
  const exited = new Promise<number | null>((ok) => child.once("exit", (code) => ok(code)));
  let stderrTail = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (text: string) => {
    stderrTail = (stderrTail + text).slice(-4000);
  });
  const lines = createInterface({ input: child.stdout! });
  let up: Omit<Stack, "stop">;
  try {
    up = await new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`no "Testament is up:" line after ${STARTUP_TIMEOUT_MS} ms`)), STARTUP_TIMEOUT_MS);
      child.once("error", (err) => {
        clearTimeout(timer);
        fail(err);
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        fail(new Error(`testament up exited with code ${code} before it was up`));
      });
      lines.on("line", (line) => {
        if (line.startsWith("Testament is up:")) {
          clearTimeout(timer);
          try {
            ok(parseUpLine(line));
          } catch (err) {
            fail(err);
          }
        }
      });
    });
  } catch (err) {
    killGroup(child, "SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
    throw new Error(`${(err as Error).message}\n--- testament up stderr (tail) ---\n${stderrTail}`);
  }

  async function stop(): Promise<number | null> {
    try {
      if (child.exitCode !== null || child.signalCode !== null) {
        return child.exitCode;
      }
      child.kill("SIGINT"); // Ctrl-C: the launcher drains and stops everything it started
      let timer: NodeJS.Timeout | undefined;
      const code = await Promise.race([
        exited,
        new Promise<"timeout">((ok) => {
          timer = setTimeout(() => ok("timeout"), SHUTDOWN_TIMEOUT_MS);
        }),
      ]);
      clearTimeout(timer);
      if (code === "timeout") {
        killGroup(child, "SIGKILL");
        await exited;
        assert.fail(`testament up did not stop within ${SHUTDOWN_TIMEOUT_MS} ms; stderr tail:\n${stderrTail}`);
      }
      assert.equal(code, 0, `testament up did not exit cleanly; stderr tail:\n${stderrTail}`);
      return code;
    } finally {
      killGroup(child, "SIGKILL");
      running.delete(child);
      await rm(dataDir, { recursive: true, force: true });
    }
  }

  return { ...up, stop };
}
