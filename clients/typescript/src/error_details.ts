// google.rpc.ErrorInfo and google.rpc.RetryInfo, described locally.
//
// scripts/generate.sh only generates Testament's protos and the google/api
// files they import, so google/rpc/error_details.proto has no generated
// module. The two messages Testament sends are described here with a
// FileDescriptorProto built in code (field numbers and names match
// third_party/googleapis/google/rpc/error_details.proto), which gives real
// descriptors for ConnectError.findDetails().

import { create, createFileRegistry, type Message } from "@bufbuild/protobuf";
import type { GenMessage } from "@bufbuild/protobuf/codegenv2";
import {
  type Duration,
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FileDescriptorProtoSchema,
  file_google_protobuf_duration,
} from "@bufbuild/protobuf/wkt";

/** google.rpc.ErrorInfo: why an error happened (reason, domain, metadata). */
export type ErrorInfo = Message<"google.rpc.ErrorInfo"> & {
  reason: string;
  domain: string;
  metadata: { [key: string]: string };
};

/** google.rpc.RetryInfo: how long to wait before retrying. */
export type RetryInfo = Message<"google.rpc.RetryInfo"> & {
  retryDelay?: Duration | undefined;
};

const LABEL_OPTIONAL = FieldDescriptorProto_Label.OPTIONAL;
const LABEL_REPEATED = FieldDescriptorProto_Label.REPEATED;
const TYPE_STRING = FieldDescriptorProto_Type.STRING;
const TYPE_MESSAGE = FieldDescriptorProto_Type.MESSAGE;

const errorDetailsFile = create(FileDescriptorProtoSchema, {
  name: "google/rpc/error_details.proto",
  package: "google.rpc",
  dependency: ["google/protobuf/duration.proto"],
  syntax: "proto3",
  messageType: [
    {
      name: "ErrorInfo",
      field: [
        { name: "reason", number: 1, label: LABEL_OPTIONAL, type: TYPE_STRING, jsonName: "reason" },
        { name: "domain", number: 2, label: LABEL_OPTIONAL, type: TYPE_STRING, jsonName: "domain" },
        {
          name: "metadata",
          number: 3,
          label: LABEL_REPEATED,
          type: TYPE_MESSAGE,
          typeName: ".google.rpc.ErrorInfo.MetadataEntry",
          jsonName: "metadata",
        },
      ],
      nestedType: [
        {
          name: "MetadataEntry",
          field: [
            { name: "key", number: 1, label: LABEL_OPTIONAL, type: TYPE_STRING, jsonName: "key" },
            { name: "value", number: 2, label: LABEL_OPTIONAL, type: TYPE_STRING, jsonName: "value" },
          ],
          options: { mapEntry: true },
        },
      ],
    },
    {
      name: "RetryInfo",
      field: [
        {
          name: "retry_delay",
          number: 1,
          label: LABEL_OPTIONAL,
          type: TYPE_MESSAGE,
          typeName: ".google.protobuf.Duration",
          jsonName: "retryDelay",
        },
      ],
    },
  ],
});

const registry = createFileRegistry(errorDetailsFile, (name) =>
  name === file_google_protobuf_duration.proto.name ? file_google_protobuf_duration : undefined,
);

function message<T extends Message>(typeName: string): GenMessage<T> {
  const desc = registry.getMessage(typeName);
  if (desc === undefined) {
    throw new Error(`testament: ${typeName} missing from the local error_details registry`);
  }
  return desc as GenMessage<T>;
}

/** Descriptor of google.rpc.ErrorInfo (use with ConnectError.findDetails). */
export const ErrorInfoSchema: GenMessage<ErrorInfo> = message<ErrorInfo>("google.rpc.ErrorInfo");

/** Descriptor of google.rpc.RetryInfo (use with ConnectError.findDetails). */
export const RetryInfoSchema: GenMessage<RetryInfo> = message<RetryInfo>("google.rpc.RetryInfo");
