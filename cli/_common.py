"""What every subcommand shares: exit codes, error translation, config provenance."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import click

from softcuda import config as _config
from softcuda.errors import SoftcudaError

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


class InputError(click.ClickException):
    """Bad input (config, script, spec, CSV): exit 2, one sentence on stderr."""

    exit_code = EXIT_INPUT

    def show(self, file=None) -> None:  # noqa: ANN001 - click's signature
        click.echo(f"error: {self.format_message()}", err=True)


@contextlib.contextmanager
def library_errors() -> Iterator[None]:
    """Turn library errors into exit 2 and warnings into one 'warning:' line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except SoftcudaError as exc:
            raise InputError(str(exc)) from None
        except OSError as exc:  # a path we were told to read or write
            where = exc.filename or "a file"
            raise InputError(f"{where}: {exc.strerror or exc}") from None
        finally:
            for message in dict.fromkeys(str(w.message) for w in caught):
                click.echo(f"warning: {message}", err=True)


def config_source(path: str | None) -> tuple[Path, str]:
    """The config file that will be used, and why (the resolution order of DESIGN.md)."""
    resolved = _config.resolve_config_path(path)
    if path is not None:
        why = "--config"
    elif os.environ.get("SOFTCUDA_CONFIG"):
        why = "$SOFTCUDA_CONFIG"
    elif resolved == Path("CONFIG.soft"):
        why = "./CONFIG.soft"
    elif resolved == _config.user_config_path():
        why = "user config"
    else:
        why = "packaged default"
    return resolved, why


def config_option(fn):
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="CONFIG.soft to use (default: $SOFTCUDA_CONFIG, ./CONFIG.soft, the user config, "
        "then the packaged DEFAULT.soft).",
    )(fn)
