import unittest

import applog


class AppLogTest(unittest.TestCase):
    def test_current_log_is_there(self):
        self.assertTrue(applog.LOG.is_file())
        self.assertIn("service started", applog.LOG.read_text())
