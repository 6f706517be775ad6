"""The demo's command line: arguments it refuses before starting anything."""

from __future__ import annotations

import pytest

from connectors.demo.__main__ import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--master", "local[2]"], "--master names a cluster"),
        (["--records", "0"], "must be positive"),
        (["--secure", "--bootstrap-servers", "k:9092"], "give its client settings with"),
    ],
)
def test_bad_arguments_exit_2_with_what_to_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
