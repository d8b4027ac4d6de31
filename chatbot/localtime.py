"""Times as people read them. The database stores UTC (ISO 8601, memory/store/connection.py now_iso); the page, the
exports and the CLI show every stored time in one zone: Korea Standard Time unless KEEM_TIMEZONE names another
(an IANA name such as Asia/Seoul, Europe/Berlin or UTC), always with the zone named."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from models.errors import InputError

KOREA = "Asia/Seoul"
KOREAN_NAMES = {KOREA: "한국 시간", "UTC": "UTC"}  # what the page calls a zone; others: their abbreviation


@dataclass(frozen=True)
class LocalTime:
    """One zone's way of showing stored times: `minute` for sentences, `stamp` with the zone's abbreviation, `iso`
    (ISO 8601 with the offset) for files and JSON."""

    name: str  # the IANA name
    zone: ZoneInfo

    def local(self, when: str | datetime) -> datetime:
        """A stored time (ISO text or datetime; one without a zone is UTC) in this zone."""
        at = datetime.fromisoformat(when) if isinstance(when, str) else when
        return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).astimezone(self.zone)

    def day(self, when: str | datetime) -> date:
        """The date of a stored time in this zone (08:00 KST on the 7th is the 7th, though UTC says the 6th)."""
        return self.local(when).date()

    def today(self) -> date:
        """Today's date in this zone."""
        return self.day(datetime.now(timezone.utc))

    def end_of(self, day: date) -> str:
        """The last second of `day` in this zone, as a stored time (UTC ISO): what was made on that day is before it."""
        end = datetime.combine(day, datetime.max.time(), self.zone).replace(microsecond=0)
        return end.astimezone(timezone.utc).isoformat(timespec="seconds")

    def minute(self, when: str | datetime, round_up: bool = False) -> str:
        """'2026-11-03 20:00' in this zone (`round_up`: a time within a minute counts as the next minute)."""
        at = self.local(when)
        if round_up and (at.second or at.microsecond):
            at = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
        return f"{at:%Y-%m-%d %H:%M}"

    def abbreviation(self, when: str | datetime | None = None) -> str:
        """The zone's short name at that time (KST, CET, UTC), or its offset (UTC+03:00) where it has none."""
        at = self.local(when or datetime.now(timezone.utc))
        short = at.tzname() or ""
        if short and short[0] not in "+-":
            return short
        offset = at.strftime("%z")
        return f"UTC{offset[:3]}:{offset[3:]}"

    def stamp(self, when: str | datetime | None, round_up: bool = False) -> str:
        """'2026-11-03 20:00 KST'; '-' for no time (`round_up`: as `minute`'s, for a time not to come before)."""
        if not when:
            return "-"
        return f"{self.minute(when, round_up)} {self.abbreviation(when)}"

    def iso(self, when: str | datetime | None) -> str | None:
        """ISO 8601 in this zone with its offset ('2026-11-03T20:00:00+09:00'); None and '' stay as they are."""
        if not when:
            return None if when is None else ""
        return self.local(when).isoformat(timespec="seconds")

    @property
    def korean(self) -> str:
        """How the page names the zone: '한국 시간' for Korea, else its abbreviation."""
        return KOREAN_NAMES.get(self.name) or self.abbreviation()


@functools.cache
def local_time(name: str) -> LocalTime:
    """The zone named by KEEM_TIMEZONE (Settings.timezone, which defaults to KOREA: the one place a zone is assumed;
    everything else is given Settings.local_time); an unknown name is an InputError saying what to give."""
    try:
        return LocalTime(name, ZoneInfo(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(
            f"KEEM_TIMEZONE={name!r} is not a time zone; give an IANA name such as Asia/Seoul, Europe/Berlin or UTC"
        ) from None
