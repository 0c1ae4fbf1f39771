"""Loading the built-in catalogue is idempotent, leaves user entries alone and survives concurrent loaders."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from hardware_db import load_hardware, load_models
from service import migrate
from service.catalogue.load import load_catalogue
from service.catalogue.service import HARDWARE, create
from service.db import make_engine, make_sessionmaker
from service.orm import HardwareProfile, HardwareProfileVersion


@pytest.mark.parametrize("empty_database_url", ["sqlite", "postgresql"], indirect=True)
def test_load_is_idempotent_and_reports_changes(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    factory = make_sessionmaker(engine)
    n_hw, n_models = len(load_hardware()), len(load_models())

    first = load_catalogue(factory)
    assert (len(first["hardware"].inserted), len(first["models"].inserted)) == (n_hw, n_models)

    second = load_catalogue(factory)
    assert second["hardware"].inserted == [] and second["hardware"].updated == []
    assert len(second["hardware"].unchanged) == n_hw and len(second["models"].unchanged) == n_models

    # A stale built-in row (an older catalogue) is brought up to date.
    with factory() as session:
        row = session.get(HardwareProfile, "h100-sxm")
        assert row is not None
        row.spec = {**row.spec, "name": "old"}
        row.spec_sha256 = "stale"
        session.commit()
    third = load_catalogue(factory)
    assert third["hardware"].updated == ["h100-sxm"]
    with factory() as session:
        assert session.scalar(select(HardwareProfile.spec).where(HardwareProfile.slug == "h100-sxm"))["name"] != "old"
        # An update is the built-in's next version; the versions before it are kept (results may name them).
        assert session.scalar(select(HardwareProfile.version).where(HardwareProfile.slug == "h100-sxm")) == 2
        kept = session.scalars(select(HardwareProfileVersion.version).where(HardwareProfileVersion.slug == "h100-sxm"))
        assert sorted(kept) == [1, 2]
    engine.dispose()


@pytest.mark.parametrize("empty_database_url", ["sqlite", "postgresql"], indirect=True)
def test_a_user_entry_holding_a_builtin_slug_is_left_alone(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    factory = make_sessionmaker(engine)
    mine = next(p for p in load_hardware() if p.slug == "h100-sxm").model_copy(update={"name": "my own"})
    with factory() as session:
        create(session, HARDWARE, mine)
        session.commit()
    report = load_catalogue(factory)["hardware"]
    assert report.shadowed == ["h100-sxm"]
    with factory() as session:
        row = session.get(HardwareProfile, "h100-sxm")
        assert row is not None and row.builtin is False and row.name == "my own"
    engine.dispose()


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
def test_concurrent_loaders_do_not_fail_or_duplicate(empty_database_url: str) -> None:
    """Several replicas starting at once each load the catalogue."""
    migrate.upgrade(empty_database_url)
    engines = [make_engine(empty_database_url) for _ in range(4)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            load_catalogue(make_sessionmaker(engines[i]))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with make_sessionmaker(engines[0])() as session:
        slugs = session.scalars(select(HardwareProfile.slug)).all()
    assert len(slugs) == len(set(slugs)) == len(load_hardware())
    for e in engines:
        e.dispose()
