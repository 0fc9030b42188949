"""The failsafe_test prompt says to set the parameter an inject_failure `warning` names (a
failsafe whose enabling parameter is 0 does nothing) and, for gcs_loss, to keep the speedup at
4 or below (docs/world.md: above it the 1 Hz wall-clock GCS heartbeat trips the failsafe alone)."""

from sitlpool.server.prompts import failsafe_test


def test_the_prompt_says_to_set_what_the_warning_names():
    for kind in ("battery_low", "gcs_loss"):
        text = failsafe_test(kind=kind)
        assert "`warning`" in text and "set_param the parameter it names" in text
        assert "FS_GCS_ENABLE" in text
        assert text.find("`warning`") < text.find('condition="failsafe"')


def test_gcs_loss_is_flown_at_speedup_4_or_below():
    text = failsafe_test(preset="windy-cmac", kind="gcs_loss")
    assert 'open_sitl(preset="windy-cmac", speedup=4)' in text
    assert "speedup <= 4 for gcs_loss" in text
    assert "speedup" not in failsafe_test(kind="battery_low").split("\n")[1], "only gcs_loss needs it"
