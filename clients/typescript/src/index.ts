// Testament TypeScript SDK: typed clients for Testament's gRPC services.

export {
  createTestamentClient,
  bearerAuth,
  withCallDefaults,
  DEFAULT_TIMEOUT_MS,
  type ServiceName,
  type TestamentClient,
  type TestamentClientOptions,
} from "./client.js";
export { TestamentError, toTestamentError, withTestamentErrors, ERROR_DOMAIN } from "./errors.js";
export { ErrorInfoSchema, RetryInfoSchema, type ErrorInfo, type RetryInfo } from "./error_details.js";
export { uploadDocument, watchReadiness, type UploadDocumentOptions } from "./streams.js";

// Connect essentials, so callers need no direct import for common cases.
export { Code, ConnectError, type CallOptions, type Client, type Transport } from "@connectrpc/connect";

// Generated messages, enums and service descriptors, one namespace per proto file.
export * as deploymentv1 from "./gen/testament/common/v1/deployment_pb.js";
export * as stagev1 from "./gen/testament/common/v1/stage_pb.js";
export * as typesv1 from "./gen/testament/common/v1/types_pb.js";
export * as optionsv1 from "./gen/testament/common/v1/options_pb.js";
export * as ingestv1 from "./gen/testament/ingest/v1/ingest_pb.js";
export * as pipelinev1 from "./gen/testament/pipeline/v1/pipeline_pb.js";
export * as retrievalv1 from "./gen/testament/retrieval/v1/retrieval_pb.js";
export * as graphv1 from "./gen/testament/graph/v1/graph_pb.js";
export * as queryspacev1 from "./gen/testament/queryspace/v1/queryspace_pb.js";
