"""HTTP routes of the planner's pages (`/ui`): server-rendered HTML (Jinja2) over the feature services; their forms
call the JSON API from the browser. Left out of the OpenAPI document: they are pages, not API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.ui import service

UI_DIR = Path(__file__).parent
STATIC_DIR = UI_DIR / "static"
templates = Jinja2Templates(directory=UI_DIR / "templates")


def figure(value: Any) -> str:
    """A catalogue figure as people write it: 989e12 (not 989000000000000.0), tiles as 256×128."""
    if isinstance(value, int):  # bool included
        return str(value)
    if isinstance(value, float):
        text = f"{value:.6g}"
        if "e" in text:
            mantissa, exponent = text.split("e")
            return f"{mantissa}e{int(exponent)}"
        return text
    if isinstance(value, list) and all(isinstance(v, dict) and set(v) == {"m", "n"} for v in value):
        return ", ".join(f"{v['m']}×{v['n']}" for v in value)
    return str(value)


templates.env.filters["figure"] = figure

router = APIRouter(prefix="/ui", include_in_schema=False, default_response_class=HTMLResponse, route_class=OrjsonRoute)

PAGES = [("plan", "Plan"), ("serving", "Under load"), ("accuracy", "Measured vs predicted"), ("catalogue", "Catalogue")]
Slug = Annotated[str | None, Query(max_length=64)]


def _page(request: Request, name: str, context: dict[str, Any]) -> HTMLResponse:
    return templates.TemplateResponse(request, f"{name}.html", {"pages": PAGES, "page": name, **context})


@router.get("", response_class=RedirectResponse)
def index() -> RedirectResponse:
    """The planner's pages start at the plan."""
    return RedirectResponse("/ui/plan")


@router.get("/plan")
def plan(request: Request, session: SessionDep) -> HTMLResponse:
    """The plan form: model, hardware, traffic, objectives and prices; the ranked fleets and their frontier."""
    return _page(request, "plan", service.choices(session))


@router.get("/serving")
def serving(request: Request, session: SessionDep) -> HTMLResponse:
    """One deployment under load: its serving estimate and the iterations over time."""
    return _page(request, "serving", service.choices(session))


@router.get("/accuracy")
def accuracy(request: Request, session: SessionDep, hardware: Slug = None, family: Slug = None) -> HTMLResponse:
    """Measured kernel times against the model's predictions, the roofline with measured points, calibrations."""
    return _page(request, "accuracy", service.accuracy_page(session, hardware, family))


@router.get("/catalogue")
def catalogue(request: Request, session: SessionDep) -> HTMLResponse:
    """Hardware profiles and models with every figure's source, and a form to add one's own."""
    return _page(request, "catalogue", service.catalogue_page(session))
