// The parts of the SDK that run anywhere (Node and browsers): service names, the client
// shape, default deadlines and credentials on any transport.

import type { DescMessage, DescMethodStreaming, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import {
  createClient,
  type Client,
  type ContextValues,
  type Interceptor,
  type StreamResponse,
  type Transport,
  type UnaryResponse,
} from "@connectrpc/connect";

import { DeploymentService } from "./gen/testament/common/v1/deployment_pb.js";
import { GraphService } from "./gen/testament/graph/v1/graph_pb.js";
import { IngestService } from "./gen/testament/ingest/v1/ingest_pb.js";
import { PipelineService } from "./gen/testament/pipeline/v1/pipeline_pb.js";
import { QuerySpaceService } from "./gen/testament/queryspace/v1/queryspace_pb.js";
import { RetrievalService } from "./gen/testament/retrieval/v1/retrieval_pb.js";

/** What `new Headers()` accepts (HeadersInit without depending on the DOM lib). */
type HeadersInit = ConstructorParameters<typeof Headers>[0];

/** The services a TestamentClient talks to (keys of the client object). */
export type ServiceName = "deployment" | "ingest" | "pipeline" | "retrieval" | "graph" | "queryspace";

/** Default deadline of every call, in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** Typed clients, one per service. */
export interface TestamentClient {
  deployment: Client<typeof DeploymentService>;
  ingest: Client<typeof IngestService>;
  pipeline: Client<typeof PipelineService>;
  retrieval: Client<typeof RetrievalService>;
  graph: Client<typeof GraphService>;
  queryspace: Client<typeof QuerySpaceService>;
  /** Closes the HTTP/2 connections this client opened (none when `transport` was given). */
  close(): void;
}

/** An interceptor that sends `authorization: Bearer <apiKey>` (unless the call set one). */
export function bearerAuth(apiKey: string): Interceptor {
  return (next) => async (req) => {
    if (!req.header.has("authorization")) {
      req.header.set("authorization", `Bearer ${apiKey}`);
    }
    return await next(req);
  };
}

/**
 * Wraps any transport so every call gets a default deadline and the bearer
 * header. Use it for transports you build yourself.
 */
export function withCallDefaults(
  transport: Transport,
  defaults: { timeoutMs?: number; apiKey?: string },
): Transport {
  const timeout = (t: number | undefined): number | undefined =>
    t === undefined && defaults.timeoutMs !== undefined && defaults.timeoutMs > 0 ? defaults.timeoutMs : t;
  const headers = (h: HeadersInit | undefined): HeadersInit | undefined => {
    if (defaults.apiKey === undefined) {
      return h;
    }
    const merged = new Headers(h);
    if (!merged.has("authorization")) {
      merged.set("authorization", `Bearer ${defaults.apiKey}`);
    }
    return merged;
  };
  return {
    unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: HeadersInit | undefined,
      input: MessageInitShape<I>,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      return transport.unary(method, signal, timeout(timeoutMs), headers(header), input, contextValues);
    },
    stream<I extends DescMessage, O extends DescMessage>(
      method: DescMethodStreaming<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: HeadersInit | undefined,
      input: AsyncIterable<MessageInitShape<I>>,
      contextValues?: ContextValues,
    ): Promise<StreamResponse<I, O>> {
      return transport.stream(method, signal, timeout(timeoutMs), headers(header), input, contextValues);
    },
  };
}

/** The six typed clients over the transport each service is reached through. */
export function clientsFor(transportFor: (service: ServiceName) => Transport, close: () => void): TestamentClient {
  return {
    deployment: createClient(DeploymentService, transportFor("deployment")),
    ingest: createClient(IngestService, transportFor("ingest")),
    pipeline: createClient(PipelineService, transportFor("pipeline")),
    retrieval: createClient(RetrievalService, transportFor("retrieval")),
    graph: createClient(GraphService, transportFor("graph")),
    queryspace: createClient(QuerySpaceService, transportFor("queryspace")),
    close,
  };
}
