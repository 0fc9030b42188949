"""The pydantic-settings model; import it through ``sitlpool.config``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .config import DEFAULT_POOL, default_data_dir, parse_pool


class Settings(BaseSettings):
    """Every ``SITLPOOL_`` setting. Constructor keywords override the environment."""

    model_config = SettingsConfigDict(env_prefix="SITLPOOL_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir, description="shared by every sitlpool process of a user or group"
    )
    lock_dir: Path | None = Field(default=None, description="default <data_dir>/leases")
    pool: Annotated[tuple[int, ...], NoDecode] = Field(
        default=parse_pool(DEFAULT_POOL), description='instances to try, e.g. "40-59" or "40,41,45-47"'
    )
    sitl_binary: Path | None = Field(
        default=None, description="a real ArduPilot SITL binary; default: the built-in vehicle"
    )
    sitl_defaults: str | None = Field(default=None, description="comma-separated parameter files passed as --defaults")
    # finite only: `inf` (or 1e400) passed `gt=0`, and a launch then waited forever for its HEARTBEAT
    speedup: float = Field(default=1.0, gt=0, le=1000, allow_inf_nan=False, description="default SITL speedup")
    ready_timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False, description="launch to first HEARTBEAT")
    idle_timeout_s: float = Field(
        default=1800.0, gt=0, allow_inf_nan=False, description="MCP sessions idle this long close themselves"
    )

    @field_validator("pool", mode="before")
    @classmethod
    def _pool(cls, v):
        if isinstance(v, str):
            return parse_pool(v)
        return v

    @field_validator("sitl_binary", mode="before")
    @classmethod
    def _empty_is_none(cls, v):
        return None if v == "" else v

    @model_validator(mode="after")
    def _lock_dir(self):
        self.data_dir = self.data_dir.expanduser()
        if self.lock_dir is None:
            self.lock_dir = self.data_dir / "leases"
        self.lock_dir = self.lock_dir.expanduser()
        return self

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"
