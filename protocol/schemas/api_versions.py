"""ApiVersions (key 18) v0: the broker's supported version ranges."""
from construct import Struct

from protocol.primitives import INT16, Array

ApiVersionsRequestV0 = Struct()

ApiVersionsResponseV0 = Struct(
    "error_code" / INT16,
    "api_versions" / Array(Struct(
        "api_key" / INT16,
        "min_version" / INT16,
        "max_version" / INT16,
    )),
)
