"""Settings precedence: defaults < KEEM_* environment < flags."""

import pytest

from chatbot.settings import Settings
from models.errors import InputError


def test_env_overrides_defaults_and_flags_override_env():
    env = {"KEEM_MODEL": "demo", "KEEM_K": "7", "KEEM_DB": "/tmp/x.db", "KEEM_LOAD_IN_4BIT": "true"}
    s = Settings.load(env)
    assert (s.model, s.k, s.db_path, s.load_in_4bit) == ("demo", 7, "/tmp/x.db", True)
    s = Settings.load(env, model="hf:x", k=None)
    assert (s.model, s.k) == ("hf:x", 7)
    assert s.update_model_spec == "hf:x"


def test_default_db_lives_in_the_user_data_directory():
    assert Settings.load({}).db_path.endswith("keem.db")


def test_bad_env_value_says_which_variable():
    with pytest.raises(InputError, match="KEEM_K"):
        Settings.load({"KEEM_K": "many"})
