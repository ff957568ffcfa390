NAME = "raises.helper"
