// Helpers around Testament's streaming RPCs; failures surface as TestamentError.

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CallOptions, Client } from "@connectrpc/connect";

import type { TestamentClient } from "./client.js";
import { toTestamentError } from "./errors.js";
import {
  IngestService,
  type UploadOptionsSchema,
  type UploadRequestSchema,
  type UploadResponse,
  type WatchReadinessRequestSchema,
  type WatchReadinessResponse,
} from "./gen/testament/ingest/v1/ingest_pb.js";

type IngestClient = Client<typeof IngestService>;

function ingestOf(client: TestamentClient | IngestClient): IngestClient {
  return "ingest" in client ? client.ingest : client;
}

/** Upload metadata: filename and mime are required (see UploadOptions). */
export type UploadDocumentOptions = MessageInitShape<typeof UploadOptionsSchema>;

/**
 * Streams one file to IngestService.Upload: first `options`, then every
 * chunk of `chunks` in order (empty chunks are skipped). Resolves with the
 * version in force; rejects with a TestamentError.
 */
export async function uploadDocument(
  client: TestamentClient | IngestClient,
  options: UploadDocumentOptions,
  chunks: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  callOptions?: CallOptions,
): Promise<UploadResponse> {
  async function* requests(): AsyncGenerator<MessageInitShape<typeof UploadRequestSchema>> {
    yield { payload: { case: "options", value: options } };
    for await (const chunk of chunks) {
      if (chunk.byteLength > 0) {
        yield { payload: { case: "chunk", value: chunk } };
      }
    }
  }
  try {
    return await ingestOf(client).upload(requests(), callOptions);
  } catch (err) {
    throw toTestamentError(err);
  }
}

/**
 * IngestService.WatchReadiness as an async iterable of reports. The server
 * ends the stream after a report that is ready or has a dead-lettered stage.
 * The client's default deadline applies (pass `callOptions.timeoutMs`, or
 * `timeoutMs: 0` for none, for long waits); errors are thrown as TestamentError.
 */
export async function* watchReadiness(
  client: TestamentClient | IngestClient,
  request: MessageInitShape<typeof WatchReadinessRequestSchema>,
  callOptions?: CallOptions,
): AsyncGenerator<WatchReadinessResponse, void, undefined> {
  try {
    for await (const response of ingestOf(client).watchReadiness(request, callOptions)) {
      yield response;
    }
  } catch (err) {
    throw toTestamentError(err);
  }
}
