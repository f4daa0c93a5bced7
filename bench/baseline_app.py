"""The reference for the endpoint benchmark: bare uvicorn + Starlette, one route, constant JSON body."""
from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

BODY = (b'{"model_name":"digits_mlp_fp32","model_version":"1","outputs":[{"name":"label","datatype":"INT64",'
        b'"shape":[1],"data":[3]}]}')


async def constant(_request) -> Response:
    return Response(BODY, media_type="application/json")


app = Starlette(routes=[Route("/v2/models/digits_mlp_fp32/infer", constant, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools",
                access_log=False, log_level="warning")
