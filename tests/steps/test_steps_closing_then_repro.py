"""A step run whose steps ended is still closing (its SITL stopping, its logs kept, its recipe
written): its status says so rather than "done", and repro of it waits for its recipe."""

from conftest import wait_for
from sitlpool.config import load_settings
from sitlpool.sessions import Sessions
from sitlpool.steps import StepRuns


def test_a_closing_run_says_closing_and_its_repro_waits_for_the_recipe(env, instances):
    sessions = Sessions(load_settings())
    runs = StepRuns(sessions)
    try:
        run = runs.start([{"hold_s": 0.2}], speedup=20)
        wait_for(lambda: run.result.done, 60, interval=0.002, what="the run's steps ended")
        st = runs.status(run.id)
        recipe = runs.root / run.id / "recipe.json"
        assert st["state"] == "closing" or recipe.is_file(), f"status says {st['state']} before the recipe is written"
        again = runs.repro(run_id=run.id)  # at once: not "no finished step run"
        assert again.finished.wait(60) and again.result.ok, again.result.error
        assert runs.status(run.id)["state"] == "done"
    finally:
        sessions.close_all()
