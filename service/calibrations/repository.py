"""Queries for calibrations. No rules here: those live in service.py; the results they are fitted on are
`service.results.repository`'s."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.orm import Calibration, HardwareProfile


class CalibrationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, calibration_id: int) -> Calibration | None:
        return self.session.get(Calibration, calibration_id)

    def latest(self, hardware: str) -> Calibration | None:
        return self.session.scalar(
            select(Calibration).where(Calibration.hardware == hardware).order_by(Calibration.version.desc()).limit(1)
        )

    def recent(self, hardware: str, limit: int = 50) -> list[Calibration]:
        """The hardware's calibrations fitted on its current version, newest first: "latest" takes, per op family,
        the newest that covers it."""
        return list(
            self.session.scalars(
                select(Calibration)
                .join(HardwareProfile, HardwareProfile.slug == Calibration.hardware)
                .where(Calibration.hardware == hardware, Calibration.hardware_version == HardwareProfile.version)
                .order_by(Calibration.version.desc())
                .limit(limit)
            ).all()
        )

    def count(self, hardware: str) -> int:
        return (
            self.session.scalar(select(func.count()).select_from(Calibration).where(Calibration.hardware == hardware))
            or 0
        )

    def next_version(self, hardware: str) -> int:
        current = self.session.scalar(select(func.max(Calibration.version)).where(Calibration.hardware == hardware))
        return (current or 0) + 1

    def add(self, calibration: Calibration) -> None:
        self.session.add(calibration)
        self.session.flush()

    def page(self, hardware: str | None, limit: int, offset: int) -> tuple[list[Calibration], int]:
        where = [] if hardware is None else [Calibration.hardware == hardware]
        total = self.session.scalar(select(func.count()).select_from(Calibration).where(*where)) or 0
        rows = self.session.scalars(
            select(Calibration).where(*where).order_by(Calibration.id.desc()).limit(limit).offset(offset)
        ).all()
        return list(rows), total
