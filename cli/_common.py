"""What every subcommand shares: exit codes, error translation, config provenance."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

import click

from softcuda.config import Config, load_config
from softcuda.errors import SoftcudaError

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


class InputError(click.ClickException):
    """Bad input (config, script, spec, CSV): exit 2, one sentence on stderr."""

    exit_code = EXIT_INPUT

    def show(self, file=None) -> None:  # noqa: ANN001 - click's signature
        click.echo(f"error: {self.format_message()}", err=True)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class Said:
    """The warnings a block of library calls gave so far (``warnings`` and the ``softcuda``
    logger's); ``flush`` prints them, one 'warning:' line each, and forgets them.  A message
    already printed in the block is not printed again (a warning raised in a loop, as
    Python's own filter would show it once)."""

    def __init__(self, logged: _Collect, caught: list[warnings.WarningMessage]) -> None:
        self.logged, self.caught = logged, caught
        self.printed: set[str] = set()

    def flush(self) -> None:
        said = [*self.logged.messages, *(str(w.message) for w in self.caught)]
        self.logged.messages.clear()
        self.caught.clear()
        for message in dict.fromkeys(said):
            if message not in self.printed:
                self.printed.add(message)
                click.echo(f"warning: {message}", err=True)


@contextlib.contextmanager
def library_errors() -> Iterator[Said]:
    """Turn library errors into exit 2, and warnings (``warnings`` and the ``softcuda``
    logger's) into one 'warning:' line each, at the end of the block (or where the block
    flushes them)."""
    logger = logging.getLogger("softcuda")
    logged = _Collect()
    logger.addHandler(logged)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        said = Said(logged, caught)
        try:
            yield said
        except SoftcudaError as exc:
            raise InputError(str(exc)) from None
        except OSError as exc:  # a path we were told to read or write
            where = exc.filename or "a file"
            raise InputError(f"{where}: {exc.strerror or exc}") from None
        finally:
            logger.removeHandler(logged)
            said.flush()


def resolve_config(path: str | None) -> Config:
    """The config a subcommand uses: ``--config`` as given, else the resolution order (a found
    profile of another device is skipped, and the command says so every time)."""
    with library_errors():
        return load_config(path, announce=True)


def config_source(config: Config) -> str:
    """Where ``config`` came from, as the command line names it."""
    return "--config" if config.source == "given" else config.source


def config_option(fn):
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="CONFIG.soft to use (default: $SOFTCUDA_CONFIG, ./CONFIG.soft, the user config, "
        "then the packaged DEFAULT.soft).",
    )(fn)
