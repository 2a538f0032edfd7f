// TestamentError: a ConnectError read through Testament's error contract.
//
// Services attach a google.rpc.Status to every error (trailer
// `grpc-status-details-bin`) holding an ErrorInfo {reason, domain "testament",
// metadata {http_status, detail}} and, for 429/503, a RetryInfo.

import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema, type ErrorInfo } from "./error_details.js";

/** The ErrorInfo domain Testament services use. */
export const ERROR_DOMAIN = "testament";

/** A failed Testament call, with the service's ErrorInfo decoded. */
export class TestamentError extends Error {
  override readonly name = "TestamentError";
  /** gRPC status code (Code.Unimplemented, Code.NotFound, ...). */
  readonly code: Code;
  /** ErrorInfo.reason, e.g. "NOT_BUILT", "VALIDATION_FAILED"; "" when the server sent none. */
  readonly reason: string;
  /** ErrorInfo.domain ("testament" for Testament's own errors; "" when absent). */
  readonly domain: string;
  /** ErrorInfo.metadata.detail parsed as JSON (the RememberStack HTTP `detail`); undefined when absent. */
  readonly detail: unknown;
  /** ErrorInfo.metadata.http_status as a number: what the HTTP gateway would answer; undefined when absent. */
  readonly httpStatus: number | undefined;
  /** RetryInfo.retry_delay in milliseconds (429 / 503); undefined when absent. */
  readonly retryAfterMs: number | undefined;
  /** All ErrorInfo metadata as sent. */
  readonly metadata: Readonly<Record<string, string>>;
  /** The ConnectError this was read from (details, metadata, raw message). */
  readonly connectError: ConnectError;

  constructor(err: ConnectError) {
    super(err.rawMessage, { cause: err });
    this.connectError = err;
    this.code = err.code;
    const info: ErrorInfo | undefined = safeFind(err);
    this.reason = info?.reason ?? "";
    this.domain = info?.domain ?? "";
    this.metadata = { ...(info?.metadata ?? {}) };
    this.httpStatus = parseStatus(this.metadata["http_status"]);
    this.detail = parseDetail(this.metadata["detail"]);
    this.retryAfterMs = retryDelayMs(err);
  }

  /** The gRPC code name, e.g. "Unimplemented". */
  get codeName(): string {
    return Code[this.code] ?? String(this.code);
  }
}

/**
 * Turns anything thrown by a Testament call into a TestamentError. A
 * TestamentError is returned as is; other errors are converted with
 * ConnectError.from (an AbortError becomes Code.Canceled, anything unknown
 * Code.Unknown).
 */
export function toTestamentError(err: unknown): TestamentError {
  if (err instanceof TestamentError) {
    return err;
  }
  return new TestamentError(ConnectError.from(err));
}

/** Runs `call` and rethrows any failure as a TestamentError. */
export async function withTestamentErrors<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw toTestamentError(err);
  }
}

function safeFind(err: ConnectError): ErrorInfo | undefined {
  try {
    const infos = err.findDetails(ErrorInfoSchema);
    return infos.find((i) => i.domain === ERROR_DOMAIN) ?? infos[0];
  } catch {
    return undefined;
  }
}

function retryDelayMs(err: ConnectError): number | undefined {
  try {
    const delay = err.findDetails(RetryInfoSchema)[0]?.retryDelay;
    if (delay === undefined) {
      return undefined;
    }
    return Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6);
  } catch {
    return undefined;
  }
}

function parseStatus(value: string | undefined): number | undefined {
  if (value === undefined || value === "") {
    return undefined;
  }
  const n = Number.parseInt(value, 10);
  return Number.isFinite(n) ? n : undefined;
}

function parseDetail(value: string | undefined): unknown {
  if (value === undefined) {
    return undefined;
  }
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return value;
  }
}
