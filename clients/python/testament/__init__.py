"""Testament Python SDK: typed sync and async clients over the generated gRPC stubs.

    from testament import Client
    with Client("127.0.0.1:50051", api_key="tsk_...") as client:
        info = client.deployment.GetDeployment(deployment_pb2.GetDeploymentRequest())

Generated messages and stubs live at the proto package paths
(``testament.ingest.v1.ingest_pb2`` …).
"""

from testament._sdk.client import AsyncClient, Client
from testament._sdk.errors import RPCError, TestamentError

__all__ = ["AsyncClient", "Client", "RPCError", "TestamentError"]
__version__ = "0.1.0"
