"""The formats a chart is served in, and the routes that serve one chart in each (`/….svg`, `/….png`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import APIRouter, Response


@dataclass(frozen=True)
class ImageFormat:
    suffix: str  # the path's extension and matplotlib's format name
    media_type: str
    label: str

    def response(self, image: bytes) -> Response:
        return Response(image, media_type=self.media_type)


FORMATS = (ImageFormat("svg", "image/svg+xml", "SVG"), ImageFormat("png", "image/png", "PNG"))

ChartEndpoint = Callable[..., Response] | Callable[..., Awaitable[Response]]  # sync, or async (a heavy chart)


def chart_routes(
    router: APIRouter, method: str, path: str
) -> Callable[[Callable[[ImageFormat], ChartEndpoint]], Callable[[ImageFormat], ChartEndpoint]]:
    """A decorator: one chart, `endpoint(fmt)` for each format, served at `{path}.{suffix}`. The routes are named
    `{endpoint}_{suffix}` (their OpenAPI operation ids) and summarised by the endpoint's one-line docstring with the
    format."""

    def register(endpoint: Callable[[ImageFormat], ChartEndpoint]) -> Callable[[ImageFormat], ChartEndpoint]:
        summary = (endpoint.__doc__ or "").strip().removesuffix(".")
        for fmt in FORMATS:
            router.add_api_route(
                f"{path}.{fmt.suffix}",
                endpoint(fmt),
                methods=[method],
                name=f"{endpoint.__name__}_{fmt.suffix}",
                description=f"{summary} ({fmt.label}).",
                response_class=Response,
                responses={200: {"content": {fmt.media_type: {}}, "description": f"The chart, {fmt.label}"}},
            )
        return endpoint

    return register
